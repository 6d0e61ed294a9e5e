//! The webhook delivery client ignores proxies from the environment: a
//! proxy would resolve the receiver's name itself, past the check of its
//! addresses.
//!
//! Proxy variables are read from the process's environment, which cannot
//! be changed safely while tests run in threads (and `set_var` is unsafe,
//! which this workspace forbids). So the test starts this test binary again
//! with the variables set, and the check runs in that child.

use std::process::Command;
use std::time::Duration;

use petstore_server::webhooks::target::{TargetPolicy, delivery_client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Set in the child: run the check instead of starting a child.
const CHILD: &str = "PETSTORE_WEBHOOK_PROXY_CHILD";

/// A proxy that refuses every connection (the discard port, where nothing
/// listens).
const DEAD_PROXY: &str = "http://127.0.0.1:9";

#[test]
fn proxies_from_the_environment_are_not_used() {
    if std::env::var_os(CHILD).is_some() {
        reaches_a_loopback_receiver_past_the_proxy();
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args(["--exact", "proxies_from_the_environment_are_not_used"])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        child.env(name, DEAD_PROXY);
        child.env(name.to_ascii_lowercase(), DEAD_PROXY);
    }
    for name in ["NO_PROXY", "no_proxy"] {
        child.env_remove(name);
    }
    let output = child.output().unwrap();
    assert!(
        output.status.success(),
        "the child failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // The child ran the check: one test passed, not zero filtered in.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("1 passed"), "{stdout}");
}

#[tokio::main(flavor = "current_thread")]
async fn reaches_a_loopback_receiver_past_the_proxy() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://localhost:{}/hook",
        listener.local_addr().unwrap().port()
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = [0; 4096];
            let _ = stream.read(&mut request).await;
            let answer = "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n";
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });

    // The control: a client that uses the environment's proxy does not
    // get through, so the variables are in force.
    let through_proxy = reqwest::Client::new().post(&url).send().await;
    assert!(through_proxy.is_err(), "{through_proxy:?}");

    let policy = TargetPolicy {
        allow_private: true,
    };
    let client = delivery_client(policy, Duration::from_secs(5)).unwrap();
    let response = client.post(&url).body("{}").send().await.unwrap();
    assert_eq!(response.status(), 204);
}
