//! Every status the contract declares for an operation comes back as a typed
//! `Error::ErrorResponse` carrying `types::Error`, and one it does not declare
//! as `Error::UnexpectedResponse`. The real server covers 400, 401 and 404
//! (see the other modules); it cannot be driven to 500 or 503, and the client
//! cannot build a body over 16 KiB for 413, so a stub answers here. The stub
//! also shows what the client puts on the wire.
#![allow(deprecated)]

use petstore_client::{Client, Error, NewPet, PetStatus, types};
use petstore_tests::KEY;

use crate::error_response;
use crate::stub::Stub;

/// `{code, message, status}` as the service sends it for `status`.
fn body(status: u16, code: &str) -> String {
    format!(r#"{{"code":"{code}","message":"stubbed {status}","status":{status}}}"#)
}

const CODES: [(u16, &str); 7] = [
    (400, "bad_request"),
    (401, "unauthorized"),
    (404, "not_found"),
    (413, "payload_too_large"),
    (429, "rate_limited"),
    (500, "internal_error"),
    (503, "service_unavailable"),
];

#[derive(Clone, Copy, Debug)]
enum Operation {
    ListPets,
    CreatePet,
    GetPet,
}

impl Operation {
    /// The statuses `openapi/petstore.yaml` declares besides success.
    fn declared(self) -> &'static [u16] {
        match self {
            Operation::ListPets => &[400, 401, 429, 500, 503],
            Operation::CreatePet => &[400, 401, 413, 429, 500, 503],
            Operation::GetPet => &[400, 401, 404, 429, 500, 503],
        }
    }

    /// Sends the operation; the pet it returns is discarded.
    async fn send(self, client: &Client) -> Result<(), Error<types::Error>> {
        match self {
            Operation::ListPets => client.list_pets().send().await.map(drop),
            Operation::CreatePet => client
                .create_pet()
                .body(NewPet::builder().name("Rex").category_id(1))
                .send()
                .await
                .map(drop),
            Operation::GetPet => client.get_pet().pet_id(7).send().await.map(drop),
        }
    }
}

const OPERATIONS: [Operation; 3] = [Operation::ListPets, Operation::CreatePet, Operation::GetPet];

#[tokio::test]
async fn every_declared_status_is_a_typed_error() {
    for operation in OPERATIONS {
        for &status in operation.declared() {
            let code = CODES.iter().find(|(s, _)| *s == status).unwrap().1;
            let stub = Stub::start(status, body(status, code)).await;
            let client = Client::with_api_key(stub.url(), KEY);
            let result = operation.send(&client).await;
            let retryable = matches!(&result, Err(e) if e.is_retryable());
            let error = error_response(result, status, code);
            assert_eq!(error.message, format!("stubbed {status}"), "{operation:?}");
            assert_eq!(
                retryable,
                [429, 503].contains(&status),
                "{operation:?} {status}"
            );
        }
    }
}

#[tokio::test]
async fn an_undeclared_status_is_an_unexpected_response() {
    for operation in OPERATIONS {
        for (status, code) in CODES {
            if operation.declared().contains(&status) {
                continue;
            }
            let stub = Stub::start(status, body(status, code)).await;
            let client = Client::with_api_key(stub.url(), KEY);
            match operation.send(&client).await {
                Err(Error::UnexpectedResponse(response)) => {
                    assert_eq!(response.status(), status, "{operation:?}");
                }
                other => {
                    panic!("{operation:?} {status}: expected UnexpectedResponse, got {other:?}")
                }
            }
        }
    }
}

#[tokio::test]
async fn requests_carry_the_key_the_parameters_and_a_contract_shaped_body() {
    let stub = Stub::start(200, "[]".into()).await;
    let client = Client::with_api_key(stub.url(), KEY);
    client
        .list_pets()
        .limit(5)
        .status(PetStatus::Sold)
        .send()
        .await
        .unwrap();
    client.list_pets().send().await.unwrap();

    let pet = r#"{"id":7,"name":"Rex","categoryId":1}"#;
    let created = Stub::start(201, pet.into()).await;
    let client_for_create = Client::with_api_key(created.url(), KEY);
    let stored = client_for_create
        .create_pet()
        .body(NewPet::builder().name("Rex").category_id(1))
        .send()
        .await
        .unwrap();
    assert_eq!(stored.status, None);

    let read = Stub::start(200, pet.into()).await;
    let client_for_get = Client::with_api_key(read.url(), KEY);
    assert_eq!(
        client_for_get.get_pet().pet_id(7).send().await.unwrap().id,
        7
    );

    let received: Vec<_> = [&stub, &created, &read]
        .iter()
        .flat_map(|s| s.received())
        .collect();
    let lines: Vec<&str> = received.iter().map(|r| r.request_line.as_str()).collect();
    assert_eq!(
        lines,
        [
            "GET /v1/pets?limit=5&status=sold HTTP/1.1",
            "GET /v1/pets HTTP/1.1",
            "POST /v1/pets HTTP/1.1",
            "GET /v1/pets/7 HTTP/1.1",
        ]
    );
    let bearer = format!("Bearer {KEY}");
    for request in &received {
        assert_eq!(
            request.header("authorization"),
            Some(bearer.as_str()),
            "{request:?}"
        );
    }
    let post = &received[2];
    assert_eq!(post.header("content-type"), Some("application/json"));
    // No `status` key at all when it is omitted (the contract rejects null).
    assert_eq!(post.body, r#"{"categoryId":1,"name":"Rex"}"#);
}
