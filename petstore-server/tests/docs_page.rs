//! The docs page in a real browser: headless Chromium, driven through
//! ChromeDriver (Debian's `chromium` and `chromium-driver`) over the W3C
//! WebDriver protocol, loads `/docs/` from a server started here, shows
//! every operation of the contract (the pets', the Store's, the feed's and
//! the webhooks'), and a reader's "Try it out" of `listPets` with a key
//! typed into "Authorize" gets `200` — read from the page. The page's
//! screenshot is written to `target/docs-page.png` (the README's).

mod common;

use std::time::Duration;

use base64::Engine;
use common::{KEY, Served, tool};
use petstore_support::{
    ChildGuard, blocking, eventually_async_within, eventually_some, free_loopback_addr,
};
use serde_json::{Value, json};

/// How long the page may take to show something. Only a hang guard: each
/// wait ends as soon as its condition holds.
const HANG: Duration = Duration::from_secs(120);

/// A WebDriver session on a ChromeDriver of its own.
struct Browser {
    http: reqwest::Client,
    /// ChromeDriver's `127.0.0.1:PORT`.
    driver_addr: String,
    session_id: String,
    _driver: ChildGuard,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start(chromium: &str, chromedriver: &str) -> Browser {
        let port = free_loopback_addr().unwrap().port();
        let driver = ChildGuard::spawn(
            "chromedriver",
            std::process::Command::new(chromedriver)
                .arg(format!("--port={port}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        )
        .unwrap();
        // Each command's timeout only keeps a hung driver from hanging the
        // test.
        let http = reqwest::Client::builder().timeout(HANG).build().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        eventually_async_within("chromedriver answers", HANG, || async {
            http.get(format!("{base}/status")).send().await.is_ok()
        })
        .await;
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--window-size=1280,1600",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let created = webdriver(
            &http,
            reqwest::Method::POST,
            &format!("{base}/session"),
            capabilities,
        )
        .await;
        let session_id = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        Browser {
            http,
            driver_addr: format!("127.0.0.1:{port}"),
            session_id,
            _driver: driver,
            _profile: profile,
        }
    }

    /// A command of this session.
    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!(
            "http://{}/session/{}{path}",
            self.driver_addr, self.session_id
        );
        webdriver(&self.http, method, &url, body).await
    }

    async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", json!({"url": url}))
            .await;
    }

    /// The element `css` selects, once the page shows it.
    async fn find(&self, css: &str) -> String {
        eventually_some(&format!("the page shows {css}"), HANG, || async {
            let found = self
                .call(
                    reqwest::Method::POST,
                    "/element",
                    json!({"using": "css selector", "value": css}),
                )
                .await;
            found
                .as_object()
                .and_then(|o| o.values().next())
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .await
    }

    async fn click(&self, css: &str) {
        let id = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            json!({}),
        )
        .await;
    }

    async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            json!({"text": text}),
        )
        .await;
    }

    /// The text of the element `css` selects, once it is not empty.
    async fn text(&self, css: &str) -> String {
        eventually_some(&format!("{css} shows a text"), HANG, || async {
            let id = self.find(css).await;
            let text = self
                .call(
                    reqwest::Method::GET,
                    &format!("/element/{id}/text"),
                    json!({}),
                )
                .await;
            let text = text.as_str().map(str::trim).filter(|t| !t.is_empty());
            text.map(str::to_owned)
        })
        .await
    }

    async fn scroll_to(&self, css: &str) {
        let script = format!("document.querySelector({css:?}).scrollIntoView()");
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            json!({"script": script, "args": []}),
        )
        .await;
    }

    async fn screenshot(&self) -> Vec<u8> {
        let png = self
            .call(reqwest::Method::GET, "/screenshot", json!({}))
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap()
    }
}

/// A WebDriver command: its answer's `value`.
async fn webdriver(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Value,
) -> Value {
    let answer: Value = http
        .request(method, url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["value"].clone()
}

impl Drop for Browser {
    /// Ends the session, which closes the browser (killing the driver
    /// alone could leave it running); blocking, as drops are.
    fn drop(&mut self) {
        use std::io::{Read, Write};
        if let Ok(mut stream) = std::net::TcpStream::connect(&self.driver_addr) {
            let _ = write!(
                stream,
                "DELETE /session/{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.session_id, self.driver_addr
            );
            // The answer comes once the browser is closed.
            let _ = stream.set_read_timeout(Some(HANG));
            let mut answer = [0u8; 1];
            let _ = stream.read(&mut answer);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_tries_list_pets_from_the_docs_page_and_gets_200() {
    let (Some(chromium), Some(chromedriver)) =
        (tool("/usr/bin/chromium"), tool("/usr/bin/chromedriver"))
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let served = blocking({
        let dir = dir.path().to_owned();
        move || Served::start(&dir, &[])
    })
    .await;
    let (status, _) = served.request(
        "POST",
        "/v1/pets",
        KEY,
        r#"{"name":"Rex","categoryId":1,"status":"available"}"#,
    );
    assert!(status.contains("201"), "{status}");

    let browser = Browser::start(chromium, chromedriver).await;
    browser
        .open(&format!("http://{}/docs/", served.address))
        .await;
    for operation in ["listPets", "createPet", "getPet"] {
        browser.find(&format!("#operations-Pets-{operation}")).await;
    }
    for operation in [
        "listOrders",
        "placeOrder",
        "getOrder",
        "updateOrder",
        "getInventory",
    ] {
        browser
            .find(&format!("#operations-Store-{operation}"))
            .await;
    }
    browser.find("#operations-Events-listEvents").await;
    for operation in [
        "listWebhooks",
        "createWebhook",
        "getWebhook",
        "deleteWebhook",
        "rotateWebhookSecret",
        "listWebhookDeliveries",
        "replayWebhook",
    ] {
        browser
            .find(&format!("#operations-Webhooks-{operation}"))
            .await;
    }

    // The reader types the key into "Authorize".
    browser.click(".auth-wrapper .authorize").await;
    browser.type_into(".auth-container input", KEY).await;
    browser
        .click(".auth-btn-wrapper .modal-btn.authorize")
        .await;
    browser.click(".auth-btn-wrapper .btn-done").await;

    // Opens listPets and executes it ("Try it out" is on from the start).
    browser
        .click("#operations-Pets-listPets .opblock-summary-control")
        .await;
    browser.click("#operations-Pets-listPets .execute").await;
    let status = browser
        .text("#operations-Pets-listPets .live-responses-table tr.response .response-col_status")
        .await;
    assert!(status.starts_with("200"), "the page shows {status:?}");
    let body = browser
        .text("#operations-Pets-listPets .live-responses-table tr.response .response-col_description pre")
        .await;
    assert!(body.contains("Rex"), "the page shows {body:?}");

    // The documented answers are the contract's examples (1.5.0), not
    // values made up from the schemas: an animal named Rex, and each error
    // response its own code.
    browser
        .click("#operations-Pets-getPet .opblock-summary-control")
        .await;
    let documented = |code: &str| {
        format!(
            "#operations-Pets-getPet .responses-table tr.response[data-code=\"{code}\"] .response-col_description"
        )
    };
    let found = browser.text(&documented("200")).await;
    assert!(found.contains("\"Rex\""), "the page shows {found:?}");
    let not_found = browser.text(&documented("404")).await;
    assert!(
        not_found.contains("\"not_found\""),
        "the page shows {not_found:?}"
    );
    let limited = browser.text(&documented("429")).await;
    assert!(
        limited.contains("\"rate_limited\""),
        "the page shows {limited:?}"
    );
    assert!(
        !not_found.contains("\"string\""),
        "the page shows {not_found:?}"
    );

    browser
        .scroll_to("#operations-Pets-listPets .execute")
        .await;
    let png = browser.screenshot().await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("docs-page.png"), png).unwrap();
    drop(browser);
    let (exit, log) = blocking(move || served.terminate()).await;
    assert!(exit.success(), "{log}");
}
