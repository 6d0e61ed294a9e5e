//! The interface: the pet store API as a dropshot API trait.
//!
//! This module says *what* the service offers — paths, parameters, bodies,
//! responses — and nothing about how. The document dropshot emits from it is
//! compared with `openapi/petstore.yaml` by the drift check, so the doc
//! comments here are written as the contract's text.

use dropshot::{
    ApiEndpointResponse, Body, HttpError, HttpResponse, HttpResponseCreated, HttpResponseHeaders,
    HttpResponseOk, Path, Query, RequestContext,
};
use http::{Response, StatusCode};
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::auth::Authenticated;
use crate::body::StrictJson;
use crate::error::ApiError;
use crate::idempotency::{CreatedHeaders, IdempotencyKey};
use crate::model::{EncodedPets, NewPet, Pet, PetStatus};

/// The most animals one `GET /pets` returns.
pub const LIMIT_MAX: i32 = 100;
/// How many animals `GET /pets` returns when `limit` is omitted.
pub const LIMIT_DEFAULT: i32 = 20;
/// The largest request body accepted, in bytes; larger ones get 413.
pub const REQUEST_BODY_MAX_BYTES: usize = 16 * 1024;

/// The contract version this interface implements (`info.version`).
pub const CONTRACT_VERSION: semver::Version = semver::Version::new(1, 2, 0);

/// The pet store API.
#[dropshot::api_description]
pub trait PetstoreApi {
    /// The server state handed to every endpoint.
    type Context;

    /// List animals
    ///
    /// Returns at most `limit` animals (20 when `limit` is omitted) in
    /// ascending `id` order, as a plain JSON array. When `status` is given,
    /// only animals with that status are returned. When `after` is given,
    /// only animals whose `id` is greater than `after` are returned: to read
    /// the next page, pass the last `id` of this one, or follow the `Link`
    /// header's `next` target.
    #[endpoint {
        method = GET,
        path = "/v1/pets",
        operation_id = "listPets",
        tags = ["Pets"],
    }]
    async fn list_pets(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        query: Query<ListPetsParams>,
    ) -> Result<PetsPage, ApiError>;

    /// Add an animal
    ///
    /// Adds an animal to the catalogue. The `201` response carries the stored
    /// animal with the `id` the service assigned. The animal is stored durably
    /// before the response is sent.
    ///
    /// With an `Idempotency-Key` header the create happens at most once per
    /// key: a retry with the same key and body gets the first `201` again
    /// (marked `Idempotent-Replayed: true`) instead of creating a second
    /// animal.
    #[endpoint {
        method = POST,
        path = "/v1/pets",
        operation_id = "createPet",
        tags = ["Pets"],
    }]
    async fn create_pet(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        idempotency_key: IdempotencyKey,
        body: StrictJson<NewPet>,
    ) -> Result<HttpResponseHeaders<HttpResponseCreated<Pet>, CreatedHeaders>, ApiError>;

    /// Get an animal (deprecated)
    ///
    /// Returns the animal with the given identifier.
    ///
    /// Deprecated: this operation will be removed on 5 December 2030. Use
    /// `GET /pets` with the `status` filter instead. Until then it keeps
    /// working, and every `200` response announces the deprecation with the
    /// `Deprecation` (RFC 9745), `Sunset` (RFC 8594) and `Link` headers.
    #[endpoint {
        method = GET,
        path = "/v1/pets/{petId}",
        operation_id = "getPet",
        tags = ["Pets"],
        deprecated = true,
    }]
    async fn get_pet(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        path: Path<PetPath>,
    ) -> Result<HttpResponseHeaders<HttpResponseOk<Pet>, DeprecationHeaders>, ApiError>;
}

/// Query parameters of `GET /pets`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListPetsParams {
    /// Maximum number of animals returned (1 to 100, default 20).
    #[serde(default = "default_limit", deserialize_with = "limit_param")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: i32,
    /// Return only animals with this status.
    #[serde(default)]
    #[schemars(with = "PetStatus")]
    pub status: Option<PetStatus>,
    /// Return only animals whose `id` is greater than this one (the last
    /// `id` of the previous page).
    #[serde(default, deserialize_with = "after_param")]
    #[schemars(with = "i64")]
    pub after: Option<i64>,
}

fn default_limit() -> i32 {
    LIMIT_DEFAULT
}

/// An integer query parameter, with a message that names it when it is not
/// one (the query extractor's own would not).
fn integer_param<'de, D, T>(deserializer: D, name: &str, expected: &str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: std::str::FromStr,
{
    let text = String::deserialize(deserializer)?;
    text.parse()
        .map_err(|_| serde::de::Error::custom(format!("{name} must be {expected}, got {text:?}")))
}

fn limit_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
    integer_param(deserializer, "limit", "an integer between 1 and 100")
}

fn after_param<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    integer_param(
        deserializer,
        "after",
        "an integer in the int64 range (the last id of a page)",
    )
    .map(Some)
}

impl ListPetsParams {
    /// The page size asked for, checked against the contract's bounds.
    pub fn checked_limit(&self) -> Result<u32, ApiError> {
        let limit = self.limit;
        u32::try_from(limit)
            .ok()
            .filter(|limit| (1..=LIMIT_MAX as u32).contains(limit))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "limit must be between 1 and {LIMIT_MAX}, got {limit}"
                ))
            })
    }
}

/// The headers of a page of `GET /pets`.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct PageHeaders {
    /// Present while more animals may follow: the next page, as
    /// `</v1/pets?limit=L&status=S&after=ID>; rel="next"` (RFC 8288).
    #[serde(rename = "Link", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub link: Option<String>,
}

impl PageHeaders {
    /// The `next` link after a page that ended at `last_id`, keeping the
    /// request's `limit` and `status`.
    pub fn next(limit: u32, status: Option<PetStatus>, last_id: i64) -> PageHeaders {
        let status = status.map_or(String::new(), |s| format!("&status={}", s.as_str()));
        PageHeaders {
            link: Some(format!(
                "</v1/pets?limit={limit}{status}&after={last_id}>; rel=\"next\""
            )),
        }
    }
}

/// The `200` of `listPets`: a page of animals, already encoded, and its
/// `Link` header. It is what `HttpResponseHeaders<HttpResponseOk<Vec<Pet>>,
/// PageHeaders>` would be — the same status, headers, bytes and OpenAPI
/// description — without a `Pet` per animal to serialise.
#[derive(Debug)]
pub struct PetsPage {
    /// The animals.
    pub pets: EncodedPets,
    /// The `next` link, if more may follow.
    pub headers: PageHeaders,
}

/// What the OpenAPI document says of a [`PetsPage`].
type DescribedAs = HttpResponseHeaders<HttpResponseOk<Vec<Pet>>, PageHeaders>;

impl HttpResponse for PetsPage {
    fn to_result(self) -> Result<Response<Body>, HttpError> {
        let mut response = Response::builder()
            .status(StatusCode::OK)
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(link) = self.headers.link {
            response = response.header(http::header::LINK, link);
        }
        response
            .body(Body::from(self.pets.into_bytes()))
            .map_err(|e| HttpError::for_internal_error(e.to_string()))
    }

    fn response_metadata() -> ApiEndpointResponse {
        DescribedAs::response_metadata()
    }

    fn status_code(&self) -> StatusCode {
        StatusCode::OK
    }
}

/// Path parameters of `GET /pets/{petId}`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PetPath {
    /// Identifier of the animal to read.
    #[serde(rename = "petId")]
    pub pet_id: i64,
}

/// The headers with which every `200` of the deprecated `getPet` announces
/// its deprecation.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeprecationHeaders {
    /// When this operation was deprecated (RFC 9745).
    #[serde(rename = "Deprecation")]
    pub deprecation: &'static str,
    /// When this operation will be removed (RFC 8594).
    #[serde(rename = "Sunset")]
    pub sunset: &'static str,
    /// The replacement operation, as a `successor-version` link.
    #[serde(rename = "Link")]
    pub link: &'static str,
}

impl DeprecationHeaders {
    /// The announcement for `GET /pets/{petId}`: deprecated since release
    /// 1.0.0 (22 November 2026), removed on 5 December 2030, replaced by
    /// `GET /pets`.
    pub fn get_pet() -> DeprecationHeaders {
        DeprecationHeaders {
            deprecation: "@1795305600",
            sunset: "Thu, 05 Dec 2030 00:00:00 GMT",
            link: "</v1/pets>; rel=\"successor-version\"",
        }
    }
}

/// The document the server emits, from the interface alone.
pub fn openapi_document() -> serde_json::Value {
    let description =
        petstore_api_mod::stub_api_description().expect("the API trait describes a valid API");
    description
        .openapi("Pet Store", CONTRACT_VERSION)
        .json()
        .expect("an OpenAPI document always serialises to JSON")
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    /// Status, headers and body of a response.
    async fn parts(response: Response<Body>) -> (StatusCode, http::HeaderMap, Vec<u8>) {
        let (head, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes().to_vec();
        (head.status, head.headers, body)
    }

    #[tokio::test]
    async fn a_pets_page_is_what_dropshot_would_send() {
        let pets = vec![
            Pet {
                id: 1,
                name: "Rex \"the\" dog".into(),
                category_id: 2,
                status: Some(PetStatus::Sold),
            },
            Pet {
                id: 7,
                name: "Tom".into(),
                category_id: -1,
                status: None,
            },
        ];
        for headers in [PageHeaders::default(), PageHeaders::next(2, None, 7)] {
            let ours = PetsPage {
                pets: EncodedPets::from_pets(&pets),
                headers: PageHeaders {
                    link: headers.link.clone(),
                },
            };
            let dropshot = DescribedAs::new(HttpResponseOk(pets.clone()), headers);
            assert_eq!(ours.status_code(), dropshot.status_code());
            assert_eq!(
                parts(ours.to_result().unwrap()).await,
                parts(dropshot.to_result().unwrap()).await
            );
        }
    }

    fn params(query: &str) -> ListPetsParams {
        serde_urlencoded::from_str(query).unwrap()
    }

    #[test]
    fn next_links_keep_limit_and_status() {
        assert_eq!(
            PageHeaders::next(20, None, 40).link.unwrap(),
            "</v1/pets?limit=20&after=40>; rel=\"next\""
        );
        assert_eq!(
            PageHeaders::next(5, Some(PetStatus::Pending), 7)
                .link
                .unwrap(),
            "</v1/pets?limit=5&status=pending&after=7>; rel=\"next\""
        );
    }

    #[test]
    fn limit_defaults_to_20_and_stays_within_1_to_100() {
        assert_eq!(params("").checked_limit().unwrap(), 20);
        assert_eq!(params("limit=1").checked_limit().unwrap(), 1);
        assert_eq!(params("limit=100").checked_limit().unwrap(), 100);
        for bad in [0, 101, -1, i32::MIN, i32::MAX] {
            let error = params(&format!("limit={bad}")).checked_limit().unwrap_err();
            assert_eq!(error.status, 400, "{bad}");
        }
    }
}
