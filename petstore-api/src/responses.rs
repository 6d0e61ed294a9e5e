//! The responses' shapes beyond the model: the headers of a page (of
//! animals, orders, events, webhook subscriptions and their deliveries) and
//! of a deprecated operation, and a page of animals already encoded.

use dropshot::{
    ApiEndpointResponse, Body, HttpError, HttpResponse, HttpResponseHeaders, HttpResponseOk,
};
use http::{Response, StatusCode};
use schemars::JsonSchema;
use serde::Serialize;

use std::fmt::{Display, Write};

use crate::model::{EncodedEvents, EncodedPets, Event, OrderInclude, OrderStatus, Pet, PetStatus};

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
        let status = status.map(PetStatus::as_str);
        let filters: [(&str, Option<&dyn Display>); 1] =
            [("status", status.as_ref().map(|s| s as &dyn Display))];
        PageHeaders {
            link: Some(next_link("/v1/pets", limit, &filters, last_id)),
        }
    }
}

/// The headers of a page of `GET /store/orders`.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct OrdersPageHeaders {
    /// Present while more orders may follow: the next page, as
    /// `</v1/store/orders?limit=L&status=S&petId=P&after=ID>; rel="next"`
    /// (RFC 8288).
    #[serde(rename = "Link", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub link: Option<String>,
}

impl OrdersPageHeaders {
    /// The `next` link after a page that ended at `last_id`, keeping the
    /// request's `limit`, `status`, `petId` and `include`.
    pub fn next(
        limit: u32,
        status: Option<OrderStatus>,
        pet_id: Option<i64>,
        include: Option<OrderInclude>,
        last_id: i64,
    ) -> OrdersPageHeaders {
        let status = status.map(OrderStatus::as_str);
        let include = include.map(OrderInclude::as_str);
        let filters: [(&str, Option<&dyn Display>); 3] = [
            ("status", status.as_ref().map(|s| s as &dyn Display)),
            ("petId", pet_id.as_ref().map(|id| id as &dyn Display)),
            ("include", include.as_ref().map(|s| s as &dyn Display)),
        ];
        OrdersPageHeaders {
            link: Some(next_link("/v1/store/orders", limit, &filters, last_id)),
        }
    }
}

/// The headers of `listEvents`' `200`: the feed has no end, so a `next`
/// link is always sent.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EventsPageHeaders {
    /// Always present: where to read on, as
    /// `</v1/events?limit=L&types=T&wait=W&after=ID>; rel="next"` (RFC
    /// 8288), keeping the request's `limit`, `types` and `wait`.
    #[serde(rename = "Link")]
    pub link: String,
}

impl EventsPageHeaders {
    /// The `next` link to read on after `next_after`, keeping the request's
    /// `limit`, `types` (when given) and `wait` (when not 0).
    pub fn next(limit: u32, types: Option<&str>, wait: u32, next_after: i64) -> EventsPageHeaders {
        let wait = (wait > 0).then_some(wait);
        let filters: [(&str, Option<&dyn Display>); 2] = [
            ("types", types.as_ref().map(|t| t as &dyn Display)),
            ("wait", wait.as_ref().map(|w| w as &dyn Display)),
        ];
        EventsPageHeaders {
            link: next_link("/v1/events", limit, &filters, next_after),
        }
    }
}

/// The headers of a page of `listWebhooks`.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct WebhooksPageHeaders {
    /// Present when the page is full, since more subscriptions may follow:
    /// the next page, as `</v1/webhooks?limit=L&after=ID>; rel="next"` (RFC
    /// 8288), keeping the request's `limit`. Absent on a page with fewer
    /// than `limit` subscriptions.
    #[serde(rename = "Link", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub link: Option<String>,
}

impl WebhooksPageHeaders {
    /// The `next` link after a full page that ended at `last_id`, keeping
    /// the request's `limit`.
    pub fn next(limit: u32, last_id: i64) -> WebhooksPageHeaders {
        WebhooksPageHeaders {
            link: Some(next_link("/v1/webhooks", limit, &[], last_id)),
        }
    }
}

/// The headers of a page of `listWebhookDeliveries`.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct DeliveriesPageHeaders {
    /// Present when the page is full, since more deliveries may follow: the
    /// next page, as `</v1/webhooks/W/deliveries?limit=L&before=ID>;
    /// rel="next"` (RFC 8288), keeping the request's `limit`, with `before`
    /// the page's last `eventId`. Absent on a page with fewer than `limit`
    /// deliveries.
    #[serde(rename = "Link", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub link: Option<String>,
}

impl DeliveriesPageHeaders {
    /// The `next` link after a full page of subscription `webhook_id`'s
    /// deliveries whose last (oldest) event was `last_event_id`, keeping
    /// the request's `limit`. Pages go from the newest event back.
    pub fn next(webhook_id: i64, limit: u32, last_event_id: i64) -> DeliveriesPageHeaders {
        let path = format!("/v1/webhooks/{webhook_id}/deliveries");
        let cursor = ("before", last_event_id);
        DeliveriesPageHeaders {
            link: Some(next_link_with(&path, limit, &[], cursor)),
        }
    }
}

/// A `next` link (RFC 8288) to `path`, keeping `limit` and the filters that
/// were given, after `last_id`. The values need no escaping: they are
/// numbers and enum spellings.
fn next_link(
    path: &str,
    limit: u32,
    filters: &[(&str, Option<&dyn Display>)],
    last_id: i64,
) -> String {
    next_link_with(path, limit, filters, ("after", last_id))
}

/// [`next_link`] with the page's cursor named: `(name, id)`, the last
/// query parameter (`after`, or `before` for pages that go back in time).
fn next_link_with(
    path: &str,
    limit: u32,
    filters: &[(&str, Option<&dyn Display>)],
    (cursor, id): (&str, i64),
) -> String {
    let mut link = format!("<{path}?limit={limit}");
    for (name, value) in filters {
        if let Some(value) = value {
            // Writing to a String cannot fail.
            let _ = write!(link, "&{name}={value}");
        }
    }
    let _ = write!(link, "&{cursor}={id}>; rel=\"next\"");
    link
}

/// A `200` whose JSON body is already encoded, with its `next` link if
/// any: what dropshot sends for a page and its headers.
fn encoded_page(json: Vec<u8>, link: Option<String>) -> Result<Response<Body>, HttpError> {
    let mut response = Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(link) = link {
        response = response.header(http::header::LINK, link);
    }
    response
        .body(Body::from(json))
        .map_err(|e| HttpError::for_internal_error(e.to_string()))
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
        encoded_page(self.pets.into_bytes(), self.headers.link)
    }

    fn response_metadata() -> ApiEndpointResponse {
        DescribedAs::response_metadata()
    }

    fn status_code(&self) -> StatusCode {
        StatusCode::OK
    }
}

/// The `200` of `listEvents`: a page of the feed, already encoded, and its
/// `Link` header. It is what `HttpResponseHeaders<HttpResponseOk<Vec<Event>>,
/// EventsPageHeaders>` would be — the same status, headers, bytes and
/// OpenAPI description — without an `Event` per event to serialise.
#[derive(Debug)]
pub struct EventsPage {
    /// The events.
    pub events: EncodedEvents,
    /// The `next` link.
    pub headers: EventsPageHeaders,
}

/// What the OpenAPI document says of an [`EventsPage`].
type EventsDescribedAs = HttpResponseHeaders<HttpResponseOk<Vec<Event>>, EventsPageHeaders>;

impl HttpResponse for EventsPage {
    fn to_result(self) -> Result<Response<Body>, HttpError> {
        encoded_page(self.events.into_bytes(), Some(self.headers.link))
    }

    fn response_metadata() -> ApiEndpointResponse {
        EventsDescribedAs::response_metadata()
    }

    fn status_code(&self) -> StatusCode {
        StatusCode::OK
    }
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

    #[tokio::test]
    async fn an_events_page_is_what_dropshot_would_send() {
        use crate::model::{EventArrayWriter, EventData, EventType};
        let time = chrono::DateTime::from_timestamp(1_795_305_600, 5_000).unwrap();
        let pet = Pet {
            id: 3,
            name: "Rex \"the\" dog".into(),
            category_id: 2,
            status: Some(PetStatus::Pending),
        };
        let events = [(
            7,
            EventType::PetStatusChanged,
            Some(PetStatus::Available),
            EventData::Pet(pet),
        )];
        let mut array = EventArrayWriter::with_capacity(events.len());
        for (id, event_type, previous, data) in &events {
            array.push(*id, *event_type, &time, *previous, data.into());
        }
        let ours = EventsPage {
            events: array.finish(),
            headers: EventsPageHeaders::next(1, Some("pet.status_changed"), 30, 7),
        };
        let contract = events
            .into_iter()
            .map(|(id, event_type, previous, data)| {
                Event::new(id, event_type, time, previous, data)
            })
            .collect();
        let headers = EventsPageHeaders::next(1, Some("pet.status_changed"), 30, 7);
        let dropshot = EventsDescribedAs::new(HttpResponseOk(contract), headers);
        assert_eq!(ours.status_code(), dropshot.status_code());
        assert_eq!(
            parts(ours.to_result().unwrap()).await,
            parts(dropshot.to_result().unwrap()).await
        );
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
    fn next_order_links_keep_limit_status_pet_and_include() {
        assert_eq!(
            OrdersPageHeaders::next(20, None, None, None, 40)
                .link
                .unwrap(),
            "</v1/store/orders?limit=20&after=40>; rel=\"next\""
        );
        assert_eq!(
            OrdersPageHeaders::next(5, Some(OrderStatus::Cancelled), Some(-3), None, 7)
                .link
                .unwrap(),
            "</v1/store/orders?limit=5&status=cancelled&petId=-3&after=7>; rel=\"next\""
        );
        assert_eq!(
            OrdersPageHeaders::next(2, None, None, Some(OrderInclude::PlacedBy), 4)
                .link
                .unwrap(),
            "</v1/store/orders?limit=2&include=placedBy&after=4>; rel=\"next\""
        );
    }

    #[test]
    fn next_webhook_links_keep_limit_and_deliveries_go_back_from_before() {
        assert_eq!(
            WebhooksPageHeaders::next(20, 40).link.unwrap(),
            "</v1/webhooks?limit=20&after=40>; rel=\"next\""
        );
        assert_eq!(
            DeliveriesPageHeaders::next(3, 5, 42).link.unwrap(),
            "</v1/webhooks/3/deliveries?limit=5&before=42>; rel=\"next\""
        );
    }
}
