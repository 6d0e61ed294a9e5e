//! The interface: the pet store API as a dropshot API trait.
//!
//! This module says *what* the service offers — paths, parameters, bodies,
//! responses — and nothing about how. The document dropshot emits from it is
//! compared with `openapi/petstore.yaml` by the drift check, so the doc
//! comments here are written as the contract's text.

use dropshot::{
    HttpResponseCreated, HttpResponseHeaders, HttpResponseOk, Path, Query, RequestContext,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::auth::Authenticated;
use crate::body::StrictJson;
use crate::error::ApiError;
use crate::model::{NewPet, Pet, PetStatus};

/// The most animals one `GET /pets` returns.
pub const LIMIT_MAX: i32 = 100;
/// How many animals `GET /pets` returns when `limit` is omitted.
pub const LIMIT_DEFAULT: i32 = 20;
/// The largest request body accepted, in bytes; larger ones get 413.
pub const REQUEST_BODY_MAX_BYTES: usize = 16 * 1024;

/// The pet store API, version 1.0.0.
#[dropshot::api_description]
pub trait PetstoreApi {
    /// The server state handed to every endpoint.
    type Context;

    /// List animals
    ///
    /// Returns at most `limit` animals (20 when `limit` is omitted) in
    /// ascending `id` order, as a plain JSON array. When `status` is given,
    /// only animals with that status are returned.
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
    ) -> Result<HttpResponseOk<Vec<Pet>>, ApiError>;

    /// Add an animal
    ///
    /// Adds an animal to the catalogue. The `201` response carries the stored
    /// animal with the `id` the service assigned. The animal is stored durably
    /// before the response is sent.
    #[endpoint {
        method = POST,
        path = "/v1/pets",
        operation_id = "createPet",
        tags = ["Pets"],
    }]
    async fn create_pet(
        rqctx: RequestContext<Self::Context>,
        auth: Authenticated,
        body: StrictJson<NewPet>,
    ) -> Result<HttpResponseCreated<Pet>, ApiError>;

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
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: i32,
    /// Return only animals with this status.
    #[serde(default)]
    #[schemars(with = "PetStatus")]
    pub status: Option<PetStatus>,
}

fn default_limit() -> i32 {
    LIMIT_DEFAULT
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
        .openapi("Pet Store", semver::Version::new(1, 0, 0))
        .json()
        .expect("an OpenAPI document always serialises to JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(query: &str) -> ListPetsParams {
        serde_urlencoded::from_str(query).unwrap()
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
