//! Walking the whole catalogue, or every order, page by page, as a
//! [`Stream`]; a page refused for now (`429`, `503`) is fetched again after
//! the `Retry-After` it carries, as the walk's [`RetryPolicy`] allows.

use std::num::NonZeroU32;

use futures::{Stream, StreamExt, TryStreamExt, stream};

use crate::retry::is_throttled;
use crate::{Client, Error, Pet, PetStatus, ResponseValue, RetryPolicy, types};

/// The largest page the service serves (the contract's `limit` maximum).
pub const PAGE_SIZE_MAX: u32 = 100;

/// A walk through the catalogue, built by [`Client::walk_pets`].
#[derive(Clone, Debug)]
#[must_use = "a walk does nothing until it is streamed"]
pub struct PetWalk<'a> {
    client: &'a Client,
    status: Option<PetStatus>,
    page_size: NonZeroU32,
    policy: RetryPolicy,
}

impl Client {
    /// Every animal in the catalogue (or of one status), in ascending `id`
    /// order, as a [`Stream`] that fetches one page at a time with
    /// `GET /pets?after=…` — keyset pagination, so no animal is skipped or
    /// seen twice, and a page costs the same at any depth. It follows each
    /// page's `Link: <…>; rel="next"` header and ends on the page that has
    /// none. A page answered `429` (over the rate limit) or `503` is asked
    /// for again after the wait its `Retry-After` names, within the walk's
    /// [`RetryPolicy`] ([`PetWalk::retry`]); the policy's end is the
    /// stream's error.
    ///
    /// ```no_run
    /// use futures::TryStreamExt;
    /// use petstore_client::{Client, PetStatus};
    ///
    /// # async fn example() -> Result<(), petstore_client::Error<petstore_client::types::Error>> {
    /// let client = Client::with_api_key("http://127.0.0.1:8080/v1", "my-api-key");
    /// let pending: Vec<_> = client
    ///     .walk_pets()
    ///     .status(PetStatus::Pending)
    ///     .page_size(100)
    ///     .stream()
    ///     .try_collect()
    ///     .await?;
    /// println!("{} animals are pending", pending.len());
    /// # Ok(())
    /// # }
    /// ```
    pub fn walk_pets(&self) -> PetWalk<'_> {
        PetWalk {
            client: self,
            status: None,
            page_size: NonZeroU32::new(PAGE_SIZE_MAX).expect("not zero"),
            policy: RetryPolicy::default(),
        }
    }
}

impl<'a> PetWalk<'a> {
    /// Only animals with `status`.
    pub fn status(mut self, status: PetStatus) -> PetWalk<'a> {
        self.status = Some(status);
        self
    }

    /// Animals per request, 1 to [`PAGE_SIZE_MAX`] (default: the maximum);
    /// values outside are clamped into that range.
    pub fn page_size(mut self, page_size: u32) -> PetWalk<'a> {
        self.page_size = NonZeroU32::new(page_size.clamp(1, PAGE_SIZE_MAX)).expect("not zero");
        self
    }

    /// Retries a page refused with `429` or `503` as `policy` says instead
    /// of [`RetryPolicy::default`].
    pub fn retry(mut self, policy: RetryPolicy) -> PetWalk<'a> {
        self.policy = policy;
        self
    }

    /// The animals, one page fetched at a time. The first error ends the
    /// stream. The stream is `Send` and `Unpin`.
    pub fn stream(
        self,
    ) -> impl Stream<Item = Result<Pet, Error<types::Error>>> + Send + Unpin + 'a {
        let policy = self.policy.clone();
        keyset(
            policy,
            move |after| {
                let mut request = self.client.list_pets().limit(self.page_size);
                if let Some(status) = self.status {
                    request = request.status(status);
                }
                if let Some(after) = after {
                    request = request.after(after);
                }
                request.send()
            },
            |pet: &Pet| pet.id,
        )
    }
}

/// A walk through the orders, built by [`Client::walk_orders`].
#[derive(Clone, Debug)]
#[must_use = "a walk does nothing until it is streamed"]
pub struct OrderWalk<'a> {
    client: &'a Client,
    status: Option<types::OrderStatus>,
    pet_id: Option<i64>,
    page_size: NonZeroU32,
    policy: RetryPolicy,
}

impl Client {
    /// Every order (or those of one status, or of one animal), in ascending
    /// `id` order, as a [`Stream`] that fetches one page at a time with
    /// `GET /store/orders?after=…`, as [`Client::walk_pets`] does (and
    /// retrying a page as it does, [`OrderWalk::retry`]).
    ///
    /// ```no_run
    /// use futures::TryStreamExt;
    /// use petstore_client::{Client, OrderStatus};
    ///
    /// # async fn example() -> Result<(), petstore_client::Error<petstore_client::types::Error>> {
    /// let client = Client::with_api_key("http://127.0.0.1:8080/v1", "my-api-key");
    /// let to_deliver: Vec<_> = client
    ///     .walk_orders()
    ///     .status(OrderStatus::Placed)
    ///     .stream()
    ///     .try_collect()
    ///     .await?;
    /// println!("{} orders wait for delivery", to_deliver.len());
    /// # Ok(())
    /// # }
    /// ```
    pub fn walk_orders(&self) -> OrderWalk<'_> {
        OrderWalk {
            client: self,
            status: None,
            pet_id: None,
            page_size: NonZeroU32::new(PAGE_SIZE_MAX).expect("not zero"),
            policy: RetryPolicy::default(),
        }
    }
}

impl<'a> OrderWalk<'a> {
    /// Only orders with `status`.
    pub fn status(mut self, status: types::OrderStatus) -> OrderWalk<'a> {
        self.status = Some(status);
        self
    }

    /// Only orders for the animal `pet_id`.
    pub fn pet_id(mut self, pet_id: i64) -> OrderWalk<'a> {
        self.pet_id = Some(pet_id);
        self
    }

    /// Orders per request, 1 to [`PAGE_SIZE_MAX`] (default: the maximum);
    /// values outside are clamped into that range.
    pub fn page_size(mut self, page_size: u32) -> OrderWalk<'a> {
        self.page_size = NonZeroU32::new(page_size.clamp(1, PAGE_SIZE_MAX)).expect("not zero");
        self
    }

    /// Retries a page refused with `429` or `503` as `policy` says instead
    /// of [`RetryPolicy::default`].
    pub fn retry(mut self, policy: RetryPolicy) -> OrderWalk<'a> {
        self.policy = policy;
        self
    }

    /// The orders, one page fetched at a time. The first error ends the
    /// stream. The stream is `Send` and `Unpin`.
    pub fn stream(
        self,
    ) -> impl Stream<Item = Result<types::Order, Error<types::Error>>> + Send + Unpin + 'a {
        let policy = self.policy.clone();
        keyset(
            policy,
            move |after| {
                let mut request = self.client.list_orders().limit(self.page_size);
                if let Some(status) = self.status {
                    request = request.status(status);
                }
                if let Some(pet_id) = self.pet_id {
                    request = request.pet_id(pet_id);
                }
                if let Some(after) = after {
                    request = request.after(after);
                }
                request.send()
            },
            |order: &types::Order| order.id,
        )
    }
}

/// The items of every page `fetch` gets, the first from the start and each
/// next one after the last `id` (read with `id`) of the one before, while
/// the pages have a `next` link; each page fetched again, as `policy`
/// says, while it is refused for now.
fn keyset<'a, T, F, Fut>(
    policy: RetryPolicy,
    fetch: F,
    id: fn(&T) -> i64,
) -> impl Stream<Item = Result<T, Error<types::Error>>> + Send + Unpin + 'a
where
    T: Send + 'a,
    F: Fn(Option<i64>) -> Fut + Send + Sync + 'a,
    Fut: Future<Output = Result<ResponseValue<Vec<T>>, Error<types::Error>>> + Send + 'a,
{
    let fetch = std::sync::Arc::new(fetch);
    let policy = std::sync::Arc::new(policy);
    // State: the cursor of the next page, or `None` once the last page has
    // been fetched.
    stream::try_unfold(Some(None), move |cursor: Option<Option<i64>>| {
        let fetch = std::sync::Arc::clone(&fetch);
        let policy = std::sync::Arc::clone(&policy);
        async move {
            let Some(after) = cursor else {
                return Ok::<_, Error<types::Error>>(None);
            };
            let mut attempt = 1;
            let response = loop {
                let error = match fetch(after).await {
                    Ok(response) => break response,
                    Err(error) => error,
                };
                let throttled = is_throttled(&error);
                let Some(wait) = policy.wait_after(&error, attempt, throttled) else {
                    return Err(error);
                };
                tokio::time::sleep(wait).await;
                attempt += 1;
            };
            let has_next = has_next_link(response.headers());
            let items = response.into_inner();
            let next = match items.last() {
                Some(last) if has_next => Some(Some(id(last))),
                _ => None,
            };
            Ok(Some((items, next)))
        }
    })
    .map_ok(|page| stream::iter(page.into_iter().map(Ok)))
    .try_flatten()
    .boxed()
}

/// Whether a `Link` header (RFC 8288) of the response has `rel="next"`.
fn has_next_link(headers: &reqwest::header::HeaderMap) -> bool {
    next_link(headers).is_some()
}

/// The target of the response's `Link` (RFC 8288) with `rel="next"`, e.g.
/// `/v1/events?limit=20&after=42`, as the header writes it.
pub(crate) fn next_link(headers: &reqwest::header::HeaderMap) -> Option<&str> {
    headers
        .get_all(reqwest::header::LINK)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(links)
        .find(|(_, params)| params.split(';').any(is_rel_next))
        .map(|(target, _)| target)
}

/// The links of one `Link` header value: each target (between `<` and `>`)
/// and its parameters, up to the comma that ends the link. A comma may be
/// inside a target or a quoted parameter, so the value is not simply split
/// at commas.
fn links(value: &str) -> impl Iterator<Item = (&str, &str)> {
    let mut rest = value;
    std::iter::from_fn(move || {
        let start = rest.find('<')?;
        let (target, after) = rest[start + 1..].split_once('>')?;
        let mut quoted = false;
        let end = after
            .char_indices()
            .find(|&(_, c)| {
                if c == '"' {
                    quoted = !quoted;
                }
                c == ',' && !quoted
            })
            .map_or(after.len(), |(i, _)| i);
        rest = &after[end..];
        Some((target, &after[..end]))
    })
}

/// Whether a link parameter is a relation that includes `next` (`rel` may
/// name several, space-separated).
fn is_rel_next(param: &str) -> bool {
    let Some((name, value)) = param.split_once('=') else {
        return false;
    };
    name.trim().eq_ignore_ascii_case("rel")
        && value
            .trim()
            .trim_matches('"')
            .split_ascii_whitespace()
            .any(|relation| relation.eq_ignore_ascii_case("next"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue, LINK};

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(LINK, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn only_a_next_relation_continues_the_walk() {
        assert!(has_next_link(&headers(&[
            "</v1/pets?limit=20&after=20>; rel=\"next\""
        ])));
        assert!(has_next_link(&headers(&[
            "</a>; rel=\"prev\", </b>; rel=next"
        ])));
        assert!(!has_next_link(&headers(&[
            "</v1/pets>; rel=\"successor-version\""
        ])));
        assert!(!has_next_link(&HeaderMap::new()));
    }

    #[test]
    fn the_next_target_is_read_whole() {
        assert_eq!(
            next_link(&headers(&[
                "</v1/events?limit=100&wait=30&after=42>; rel=\"next\""
            ])),
            Some("/v1/events?limit=100&wait=30&after=42")
        );
        // Commas inside a target or a quoted parameter do not end the link.
        assert_eq!(
            next_link(&headers(&[
                "</a,b>; title=\"x, y\"; rel=\"prev\", </c?d=1,2>; rel=\"last next\""
            ])),
            Some("/c?d=1,2")
        );
        assert_eq!(
            next_link(&headers(&["</a>; rel=\"prev\"", "</b>; REL=Next"])),
            Some("/b")
        );
        assert_eq!(next_link(&headers(&["</a>; rel=\"nextish\""])), None);
        assert_eq!(next_link(&headers(&["garbage; rel=next"])), None);
    }

    #[test]
    fn page_sizes_are_kept_within_the_contract() {
        let client = Client::with_api_key("http://127.0.0.1:1/v1", "k");
        let size = |n| client.walk_pets().page_size(n).page_size.get();
        assert_eq!(size(0), 1);
        assert_eq!(size(500), PAGE_SIZE_MAX);
        assert_eq!(size(7), 7);
    }
}
