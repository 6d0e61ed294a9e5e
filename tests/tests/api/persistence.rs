//! What the service acknowledged is still there after a restart, and each
//! request leaves one log record.

use petstore_tests::on_every_backend;
use serde_json::{Value, json};

on_every_backend! {
    async fn pets_survive_a_restart_unchanged_and_ids_keep_growing(server) {
        let mut pets = Vec::new();
        for (i, status) in [Some("available"), None, Some("sold")]
            .into_iter()
            .enumerate()
        {
            let mut body = json!({"name": format!("keeper-{i}"), "categoryId": i});
            if let Some(status) = status {
                body["status"] = json!(status);
            }
            pets.push(server.create(body).await);
        }
        server.restart().await;

        assert_eq!(server.list("").await, pets);
        for pet in &pets {
            let read = server.read(&pet["id"]).await;
            assert_eq!(&read, pet);
        }
        let newer = server
            .create(json!({"name": "after", "categoryId": 1}))
            .await;
        assert!(newer["id"].as_i64() > pets.last().unwrap()["id"].as_i64());
    }

    async fn each_request_is_logged_once_with_its_outcome(server) {
        server.get("/pets?limit=3").send().await.unwrap();
        let log = server.log_eventually_contains("/v1/pets?limit=3").await;
        let records: Vec<Value> = log
            .lines()
            .map(|line| serde_json::from_str(line).expect("every log line is JSON"))
            .filter(|record: &Value| record["msg"] == "request completed")
            .collect();
        assert_eq!(records.len(), 1, "{log}");
        let record = &records[0];
        assert_eq!(record["method"], "GET");
        assert_eq!(record["uri"], "/v1/pets?limit=3");
        assert_eq!(record["response_code"], 200);
        assert!(record["latency_us"].is_u64(), "{record}");
        assert!(record["req_id"].is_string(), "{record}");
    }
}
