//! `getPet` (`GET /pets/{petId}`, deprecated): 200 with the pet and the
//! deprecation headers; 404 when no pet has the id; 400 when the id is not
//! an int64.

use petstore_tests::{assert_error, on_every_backend};
use reqwest::StatusCode;
use serde_json::{Value, json};

on_every_backend! {
    async fn returns_the_pet_and_announces_the_deprecation(server) {
        let pet = server
            .create(json!({"name": "Rex", "categoryId": 9, "status": "pending"}))
            .await;
        let response = server
            .get(&format!("/pets/{}", pet["id"]))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers().clone();
        assert_eq!(headers["content-type"], "application/json");
        // 2026-11-22T00:00:00Z, the release of 1.0.0, as RFC 9745 writes it.
        assert_eq!(headers["deprecation"], "@1795305600");
        assert_eq!(headers["sunset"], "Thu, 05 Dec 2030 00:00:00 GMT");
        assert_eq!(headers["link"], "</v1/pets>; rel=\"successor-version\"");
        assert_eq!(response.json::<Value>().await.unwrap(), pet);
    }

    async fn many_reads_of_one_pet_at_once_all_find_it(server) {
        let pet = server.create(json!({"name": "Rex", "categoryId": 9})).await;
        let path = format!("/pets/{}", pet["id"]);
        let reads = (0..64).map(|_| server.get(&path).send());
        for response in futures::future::join_all(reads).await {
            let response = response.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(response.json::<Value>().await.unwrap(), pet);
        }
    }

    async fn an_unknown_id_gets_404(server) {
        let pet = server.create(json!({"name": "Rex", "categoryId": 1})).await;
        let unknown = pet["id"].as_i64().unwrap() + 1;
        for id in [unknown, 0, -1, i64::MAX, i64::MIN] {
            let response = server.get(&format!("/pets/{id}")).send().await.unwrap();
            let error = assert_error(response, StatusCode::NOT_FOUND, "not_found").await;
            assert!(
                error["message"].as_str().unwrap().contains(&id.to_string()),
                "{error}"
            );
        }
    }

    async fn an_id_that_is_not_an_int64_gets_400(server) {
        for id in [
            "abc",
            "1.5",
            "9223372036854775808",
            "-9223372036854775809",
            "1e3",
            "0x10",
            "%20",
        ] {
            let response = server.get(&format!("/pets/{id}")).send().await.unwrap();
            assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        }
        // A huge id is named, not sent back whole.
        let huge = "9".repeat(7_000);
        let response = server.get(&format!("/pets/{huge}")).send().await.unwrap();
        let error = assert_error(response, StatusCode::BAD_REQUEST, "bad_request").await;
        let message = error["message"].as_str().unwrap();
        assert!(message.chars().count() < 1_100, "{} characters", message.len());
        assert!(message.contains("(cut: the message has"), "{message}");
    }
}
