//! The contract in people's hands: the committed document and the
//! interactive page, served without a key (and not part of the pet API).

use petstore_tests::TestServer;
use reqwest::StatusCode;
use serde_json::Value;

const CONTRACT: &str = include_str!("../../../openapi/petstore.yaml");

async fn fetch(server: &TestServer, path: &str) -> (StatusCode, String, String) {
    let url = format!("http://{}{path}", server.addr());
    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(url)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map_or(String::new(), |v| v.to_str().unwrap().to_owned());
    let location = response
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.text().await.unwrap();
    (status, content_type, location.unwrap_or(body))
}

#[tokio::test]
async fn the_committed_contract_is_served_without_a_key() {
    let server = TestServer::start().await;
    let (status, content_type, yaml) = fetch(&server, "/openapi.yaml").await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::OK, "application/yaml")
    );
    assert_eq!(yaml, CONTRACT, "byte for byte");
    let (status, content_type, json) = fetch(&server, "/openapi.json").await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::OK, "application/json")
    );
    let json: Value = serde_json::from_str(&json).unwrap();
    let yaml: Value = serde_norway::from_str(CONTRACT).unwrap();
    assert_eq!(json, yaml, "the same document");
}

#[tokio::test]
async fn the_docs_page_and_every_asset_it_names_are_served() {
    let server = TestServer::start().await;
    let (status, _, location) = fetch(&server, "/docs").await;
    assert_eq!(
        (status, location.as_str()),
        (StatusCode::MOVED_PERMANENTLY, "/docs/")
    );
    let (status, content_type, page) = fetch(&server, "/docs/").await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::OK, "text/html")
    );
    assert!(page.contains("swagger-ui"), "{page}");
    // Every script and stylesheet the page loads is served from here (no
    // other host: the page works offline).
    let assets: Vec<&str> = page
        .split(['"', '\''])
        .filter(|part| part.ends_with(".js") || part.ends_with(".css") || part.ends_with(".png"))
        .collect();
    assert!(assets.len() >= 4, "{assets:?}");
    for asset in assets {
        assert!(
            !asset.contains("//") && !asset.starts_with('/'),
            "{asset} is not served from here"
        );
        let file = asset.trim_start_matches("./");
        let (status, _, _) = fetch(&server, &format!("/docs/{file}")).await;
        assert_eq!(status, StatusCode::OK, "{asset}");
    }
    // The page renders the contract, with this server first, so that "Try
    // it out" calls the server that serves the page.
    let (_, _, initializer) = fetch(&server, "/docs/swagger-initializer.js").await;
    assert!(
        initializer.contains("\"url\": \"/docs/openapi.json\""),
        "{initializer}"
    );
    let (status, _, page_contract) = fetch(&server, "/docs/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let mut page_contract: Value = serde_json::from_str(&page_contract).unwrap();
    let servers = page_contract["servers"].as_array_mut().unwrap();
    assert_eq!(servers.remove(0)["url"], "/v1");
    let yaml: Value = serde_norway::from_str(CONTRACT).unwrap();
    assert_eq!(page_contract, yaml, "otherwise the contract itself");
    // A file the page does not have is the contract's 404, as any path
    // the contract does not define.
    for path in ["/docs/no-such-file.js", "/docs/a/b", "/docs/x"] {
        let (status, content_type, body) = fetch(&server, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(content_type, "application/json", "{path}");
        let error: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["code"], "not_found", "{path}: {body}");
        assert_eq!(error["status"], 404, "{path}: {body}");
        assert!(
            error["message"].as_str().unwrap().contains("/docs/"),
            "{body}"
        );
    }
}
