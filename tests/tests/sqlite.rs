//! Properties of the embedded SQLite default that the API suite cannot see.

use petstore_server::storage::DatabaseUrl;
use petstore_tests::{Backend, TestServer, assert_error, fresh_database};
use reqwest::StatusCode;
use serde_json::json;

/// Reads are served from the in-memory copy of the committed catalogue and
/// never touch the file: a change another program commits to the file is
/// not seen until the server loads the file again. (The server must be the
/// file's only writer; this test breaks that rule on purpose to see where
/// reads come from.)
#[tokio::test]
async fn reads_come_from_memory_not_from_the_file() {
    let database = fresh_database(Backend::Sqlite).await.unwrap();
    let DatabaseUrl::Sqlite(path) = database.url.clone() else {
        unreachable!()
    };
    let mut server = TestServer::start_on(database).await;
    let rex = server.create(json!({"name": "Rex", "categoryId": 1})).await;

    let other_program = rusqlite::Connection::open(&path).unwrap();
    let changed = other_program
        .execute(
            "UPDATE pets SET name = 'Changed' WHERE id = ?1",
            [rex["id"].as_i64()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(other_program);

    assert_eq!(server.list("").await, vec![rex.clone()]);
    assert_eq!(server.read(&rex["id"]).await, rex);

    // The change did land in the file: a server that loads it sees it.
    server.restart().await;
    assert_eq!(server.read(&rex["id"]).await["name"], "Changed");
}

/// A database file deleted under the running server (or replaced, e.g. by
/// a restore copied over it) is noticed before anything more is
/// acknowledged: creates get 503, since a 201 for a write into a file
/// nobody will open again would be a lie, and the log says why.
#[tokio::test]
async fn a_deleted_database_file_refuses_creates_and_says_why() {
    let database = fresh_database(Backend::Sqlite).await.unwrap();
    let DatabaseUrl::Sqlite(path) = database.url.clone() else {
        unreachable!()
    };
    let server = TestServer::start_on(database).await;
    let rex = server.create(json!({"name": "Rex", "categoryId": 1})).await;
    std::fs::remove_file(&path).unwrap();

    let response = server
        .post_pet(&json!({"name": "Lost", "categoryId": 2}))
        .send()
        .await
        .unwrap();
    assert_error(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
    )
    .await;
    server
        .log_eventually_contains("the database file was deleted or replaced")
        .await;
    assert_eq!(server.list("").await, vec![rex]);
}
