// Copyright 2020 Oxide Computer Company

use dropshot::{
    ApiDescription, HttpError, HttpResponseOk, PaginationParams, Query,
    RequestContext, ResultsPage, endpoint,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::{io::Cursor, str::from_utf8};

#[derive(JsonSchema, Serialize)]
struct ResponseItem {
    word: String,
}

#[derive(Deserialize, JsonSchema, Serialize)]
struct ScanParams {
    garbage_goes_in: GarbageGoesIn,
}

#[derive(Copy, Clone, Debug, Deserialize, JsonSchema, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GarbageGoesIn {
    GarbageCan,
}

#[derive(Deserialize, JsonSchema, Serialize)]
struct PageSelector {
    scan: ScanParams,
    last_seen: String,
}

#[endpoint {
    method = GET,
    path = "/super_pages",
}]
async fn handler(
    _rqctx: RequestContext<()>,
    _query: Query<PaginationParams<ScanParams, PageSelector>>,
) -> Result<HttpResponseOk<ResultsPage<ResponseItem>>, HttpError> {
    unimplemented!();
}

#[test]
fn test_pagination_schema() -> anyhow::Result<()> {
    let mut api = ApiDescription::new();
    api.register(handler)?;
    let mut output = Cursor::new(Vec::new());

    let _ = api
        .openapi("test", semver::Version::new(1985, 7, 0))
        .description("gusty winds may exist")
        .contact_name("old mate")
        .license_name("CDDL")
        .terms_of_service("no hat, no cane? no service!")
        .write(&mut output);
    let actual = from_utf8(&output.get_ref()).unwrap();

    expectorate::assert_contents("tests/test_pagination_schema.json", actual);
    Ok(())
}
