//! Properties of the embedded SQLite default that the API suite cannot see.

use std::time::Duration;

use petstore_server::store::DatabaseUrl;
use petstore_tests::{Backend, TestServer, fresh_database};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn reads_do_not_wait_for_an_open_write_transaction() {
    let (database, dir) = fresh_database(Backend::Sqlite).await.unwrap();
    let DatabaseUrl::Sqlite(path) = &database else {
        unreachable!()
    };
    let server = TestServer::start_on(database.clone(), dir).await;
    let pet = server.create(json!({"name": "Rex", "categoryId": 1})).await;

    // Another writer holds the database's write lock, mid-transaction.
    let writer = rusqlite::Connection::open(path).unwrap();
    let mode: String = writer
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal", "the server put the database in WAL mode");
    writer
        .execute_batch("BEGIN IMMEDIATE; INSERT INTO pets (name, category_id) VALUES ('x', 1);")
        .unwrap();

    // Reads are served from the committed catalogue in memory and never
    // wait for the lock (the server's lock wait is 5 s; the timeout only
    // catches a hang).
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(4))
        .build()
        .unwrap();
    let response = client
        .get(server.url("/pets"))
        .bearer_auth(petstore_tests::KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.json::<serde_json::Value>().await.unwrap(),
        json!([pet])
    );
    writer.execute_batch("ROLLBACK").unwrap();
}
