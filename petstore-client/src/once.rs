//! [`Client::create_pet_once`] and [`Client::place_order_once`]: a create
//! that stores the animal, an order that is placed, exactly once, however
//! often the network or the service fails along the way.
//!
//! Every attempt carries the same `Idempotency-Key` and the same body, so
//! the service creates the animal at most once and answers every retry
//! after the first success with that same animal (`Idempotent-Replayed:
//! true`). Retrying until a `201` comes then makes it exactly once.

use reqwest::StatusCode;

use crate::retry::is_throttled;
use crate::{Client, Error, ResponseValue, RetryPolicy, types};

/// An animal stored by [`Client::create_pet_once`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CreatedOnce {
    /// The stored animal, with the `id` the service assigned.
    pub pet: types::Pet,
    /// The idempotency key every attempt carried.
    pub idempotency_key: String,
    /// How many attempts it took.
    pub attempts: u32,
    /// Whether the `201` that ended it was a replay: an earlier attempt had
    /// stored the animal, but its answer was lost.
    pub replayed: bool,
}

/// An order placed by [`Client::place_order_once`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PlacedOnce {
    /// The order as it was placed (a replay answers it so even if it has
    /// been delivered or cancelled since).
    pub order: types::Order,
    /// The idempotency key every attempt carried.
    pub idempotency_key: String,
    /// How many attempts it took.
    pub attempts: u32,
    /// Whether the `201` that ended it was a replay: an earlier attempt had
    /// placed the order, but its answer was lost.
    pub replayed: bool,
}

/// A request sent with one idempotency key until it is answered: the
/// builder of [`Client::create_pet_once`] ([`CreatePetOnce`]) and of
/// [`Client::place_order_once`] ([`PlaceOrderOnce`]).
#[derive(Debug)]
pub struct Once<'a, B> {
    client: &'a Client,
    body: B,
    idempotency_key: String,
    policy: RetryPolicy,
}

/// Builder for [`Client::create_pet_once`].
pub type CreatePetOnce<'a> = Once<'a, types::NewPet>;

/// Builder for [`Client::place_order_once`].
pub type PlaceOrderOnce<'a> = Once<'a, types::NewOrder>;

impl Client {
    /// Adds `pet` to the catalogue exactly once.
    ///
    /// Generates an idempotency key (a UUID v4; choose your own with
    /// [`Once::idempotency_key`], e.g. one saved with the work it
    /// belongs to, so that even a restarted process retries with it), sends
    /// the create, and retries with the same key and body on every failure
    /// after which the animal may or may not have been stored: a
    /// communication error or timeout, a `503`, a `502` or `504` from a
    /// proxy, and a `409` (an earlier attempt is still being processed);
    /// and on a `429` (over the rate limit, nothing done). A `429` or `503`
    /// is retried after the `Retry-After` it carries, within the policy's
    /// cap. Any other error is returned at once. When the attempts run out (see
    /// [`RetryPolicy`]), the last error is returned: the animal was then
    /// stored at most once, and a later retry with the same key and body
    /// ([`Once::key`], read before sending) finishes the job, for
    /// 24 hours at least.
    ///
    /// ```no_run
    /// use petstore_client::{Client, NewPet, RetryPolicy};
    ///
    /// # async fn example() -> Result<(), petstore_client::Error<petstore_client::types::Error>> {
    /// let client = Client::with_api_key("http://127.0.0.1:8080/v1", "my-api-key");
    /// let pet = NewPet::builder().name("Rex").category_id(1).try_into().unwrap();
    /// let created = client
    ///     .create_pet_once(pet)
    ///     .retry(RetryPolicy::with_max_attempts(20))
    ///     .send()
    ///     .await?;
    /// println!("stored as {} after {} attempt(s)", created.pet.id, created.attempts);
    /// # Ok(())
    /// # }
    /// ```
    pub fn create_pet_once(&self, pet: types::NewPet) -> CreatePetOnce<'_> {
        Once::new(self, pet)
    }

    /// Orders the animal `pet_id` exactly once, as [`Client::create_pet_once`]
    /// adds one: the same idempotency key on every attempt, retried through
    /// communication errors, `429`, `502`/`503`/`504` (waiting for
    /// `Retry-After`) and the `409` of an attempt still in progress. An answer that no retry can change ends it at
    /// once: `409 pet_not_available` (the animal is not `available`; a retry
    /// whose first attempt did place the order gets that order instead),
    /// `422 pet_not_found`, `400`.
    ///
    /// ```no_run
    /// use petstore_client::Client;
    ///
    /// # async fn example() -> Result<(), petstore_client::Error<petstore_client::types::Error>> {
    /// let client = Client::with_api_key("http://127.0.0.1:8080/v1", "my-api-key");
    /// let placed = client.place_order_once(42).send().await?;
    /// println!("order {} placed at {}", placed.order.id, placed.order.placed_at);
    /// # Ok(())
    /// # }
    /// ```
    pub fn place_order_once(&self, pet_id: i64) -> PlaceOrderOnce<'_> {
        Once::new(self, types::NewOrder { pet_id })
    }
}

impl<'a, B> Once<'a, B> {
    fn new(client: &'a Client, body: B) -> Once<'a, B> {
        Once {
            client,
            body,
            idempotency_key: uuid::Uuid::new_v4().to_string(),
            policy: RetryPolicy::default(),
        }
    }

    /// Uses `key` instead of a generated one (1 to 255 visible ASCII
    /// characters; the service refuses anything else with `400`).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = key.into();
        self
    }

    /// Retries as `policy` says instead of [`RetryPolicy::default`].
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The key every attempt will carry.
    pub fn key(&self) -> &str {
        &self.idempotency_key
    }

    /// Sends `attempt` until it is answered, as the policy says; returns
    /// the answer, the attempts it took and whether it was a replay.
    async fn until_answered<T, F, Fut>(
        &self,
        attempt: F,
    ) -> Result<(T, u32, bool), Error<types::Error>>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<ResponseValue<T>, Error<types::Error>>>,
    {
        let mut attempts = 1;
        loop {
            match attempt().await {
                Ok(response) => {
                    let replayed = response
                        .headers()
                        .get("idempotent-replayed")
                        .is_some_and(|value| value == "true");
                    return Ok((response.into_inner(), attempts, replayed));
                }
                Err(error) => {
                    let retryable = is_retryable(&error);
                    let Some(wait) = self.policy.wait_after(&error, attempts, retryable) else {
                        return Err(error);
                    };
                    tokio::time::sleep(wait).await;
                    attempts += 1;
                }
            }
        }
    }
}

impl CreatePetOnce<'_> {
    /// Creates the animal, retrying as the policy says.
    pub async fn send(self) -> Result<CreatedOnce, Error<types::Error>> {
        let (pet, attempts, replayed) = self
            .until_answered(|| {
                let create = self.client.create_pet();
                let create = create.idempotency_key(self.idempotency_key.as_str());
                create.body(self.body.clone()).send()
            })
            .await?;
        Ok(CreatedOnce {
            pet,
            idempotency_key: self.idempotency_key,
            attempts,
            replayed,
        })
    }
}

impl PlaceOrderOnce<'_> {
    /// Places the order, retrying as the policy says.
    pub async fn send(self) -> Result<PlacedOnce, Error<types::Error>> {
        let (order, attempts, replayed) = self
            .until_answered(|| {
                let place = self.client.place_order();
                let place = place.idempotency_key(self.idempotency_key.as_str());
                place.body(self.body.clone()).send()
            })
            .await?;
        Ok(PlacedOnce {
            order,
            idempotency_key: self.idempotency_key,
            attempts,
            replayed,
        })
    }
}

/// Whether a retry with the same key is the way to finish the job: the
/// request may or may not have taken effect (a communication error, a
/// gateway's or the service's unavailability, or a `409` saying that an
/// earlier attempt with the key is still in progress — not one saying the
/// animal cannot be ordered), or it was refused untouched for now (`429`).
fn is_retryable(error: &Error<types::Error>) -> bool {
    let retry_status = |status: StatusCode| {
        matches!(
            status,
            StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT
        )
    };
    match error {
        error if is_throttled(error) => true,
        Error::CommunicationError(_) | Error::ResponseBodyError(_) => true,
        Error::ErrorResponse(response) if response.status() == StatusCode::CONFLICT => {
            response.code == "idempotency_key_in_use"
        }
        Error::ErrorResponse(response) => retry_status(response.status()),
        Error::UnexpectedResponse(response) => retry_status(response.status()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_fresh_uuids() {
        let client = Client::new("http://127.0.0.1:1/v1");
        let pet: types::NewPet = types::NewPet::builder()
            .name("Rex")
            .category_id(1)
            .try_into()
            .unwrap();
        let a = client.create_pet_once(pet.clone());
        let b = client.create_pet_once(pet);
        assert_ne!(a.key(), b.key());
        let uuid = uuid::Uuid::parse_str(a.key()).unwrap();
        assert_eq!(uuid.get_version_num(), 4);
    }
}
