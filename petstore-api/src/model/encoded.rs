//! Pets and events already encoded as the contract's JSON, so that a store
//! can write a response body straight from its rows, without a [`Pet`] (and
//! a `String` per name) in between, and so that the names of fields and
//! other fixed text are copied, not escaped byte by byte as serde_json
//! escapes every string it writes (a page of events spent a fifth of its
//! instructions there: BENCHMARKS.md, "Issue 28, third pass").
//!
//! The bytes are exactly what serde gives for the same [`Pet`]s and
//! [`Event`]s; the unit tests hold the two side by side.

use chrono::{DateTime, SecondsFormat, Utc};

use super::order::write_rfc3339_micros;
use super::{EventData, EventType, Order, Pet, PetStatus};

/// A JSON array of pets, as the contract's `[Pet]`.
#[derive(Clone, Debug)]
pub struct EncodedPets {
    /// UTF-8 JSON.
    json: Vec<u8>,
    last_id: Option<i64>,
}

impl EncodedPets {
    /// The id of the last pet, if any.
    pub fn last_id(&self) -> Option<i64> {
        self.last_id
    }

    /// The JSON text, as bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.json
    }

    /// `pets`, encoded.
    pub fn from_pets<'a>(pets: impl IntoIterator<Item = &'a Pet>) -> EncodedPets {
        let mut array = PetArrayWriter::with_capacity(0);
        for pet in pets {
            array.push(pet.id, &pet.name, pet.category_id, pet.status);
        }
        array.finish()
    }
}

/// Writes a JSON array of pets, one at a time.
#[derive(Debug)]
pub struct PetArrayWriter {
    json: Vec<u8>,
    count: usize,
    last_id: Option<i64>,
}

impl PetArrayWriter {
    /// A writer with room for about `pets` pets.
    pub fn with_capacity(pets: usize) -> PetArrayWriter {
        let mut json = Vec::with_capacity(2 + pets * 72);
        json.push(b'[');
        PetArrayWriter {
            json,
            count: 0,
            last_id: None,
        }
    }

    /// Appends a pet, as serde writes a [`Pet`] with these fields: in
    /// [`Pet`]'s order, `status` left out when absent, the name escaped by
    /// serde_json itself.
    pub fn push(&mut self, id: i64, name: &str, category_id: i64, status: Option<PetStatus>) {
        if self.count > 0 {
            self.json.push(b',');
        }
        write_pet(&mut self.json, id, name, category_id, status);
        self.count += 1;
        self.last_id = Some(id);
    }

    /// The array.
    pub fn finish(mut self) -> EncodedPets {
        self.json.push(b']');
        EncodedPets {
            json: self.json,
            last_id: self.last_id,
        }
    }
}

/// The resource of an event, borrowed: what the writers encode, so that a
/// store can write an event straight from its rows, without an
/// [`EventData`] (and a `String` per name) in between.
#[derive(Clone, Copy, Debug)]
pub enum EventDataRef<'a> {
    /// A [`Pet`] with these fields.
    Pet {
        /// Its id.
        id: i64,
        /// Its name.
        name: &'a str,
        /// Its category's id.
        category_id: i64,
        /// Its status, if it has one.
        status: Option<PetStatus>,
    },
    /// An order.
    Order(&'a Order),
}

impl<'a> From<&'a EventData> for EventDataRef<'a> {
    fn from(data: &'a EventData) -> EventDataRef<'a> {
        match data {
            EventData::Pet(pet) => EventDataRef::Pet {
                id: pet.id,
                name: &pet.name,
                category_id: pet.category_id,
                status: pet.status,
            },
            EventData::Order(order) => EventDataRef::Order(order),
        }
    }
}

impl From<EventDataRef<'_>> for EventData {
    fn from(data: EventDataRef<'_>) -> EventData {
        match data {
            EventDataRef::Pet {
                id,
                name,
                category_id,
                status,
            } => EventData::Pet(Pet {
                id,
                name: name.to_owned(),
                category_id,
                status,
            }),
            EventDataRef::Order(order) => EventData::Order(order.clone()),
        }
    }
}

/// A JSON array of events, as the contract's `[Event]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedEvents {
    /// UTF-8 JSON.
    json: Vec<u8>,
    count: usize,
}

impl EncodedEvents {
    /// Whether the array has no event.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The JSON text's length in bytes.
    pub fn byte_len(&self) -> usize {
        self.json.len()
    }

    /// The JSON text, as bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.json
    }
}

/// Writes a JSON array of events, one at a time.
#[derive(Debug)]
pub struct EventArrayWriter {
    json: Vec<u8>,
    count: usize,
    /// Where the last event appended starts.
    last: usize,
}

impl EventArrayWriter {
    /// A writer with room for about `events` events.
    pub fn with_capacity(events: usize) -> EventArrayWriter {
        let mut json = Vec::with_capacity(2 + events * 320);
        json.push(b'[');
        EventArrayWriter {
            json,
            count: 0,
            last: 1,
        }
    }

    /// Appends the event that `Event::new` makes of these, as serde
    /// writes it.
    pub fn push(
        &mut self,
        id: i64,
        event_type: EventType,
        time: &DateTime<Utc>,
        previous_status: Option<PetStatus>,
        data: EventDataRef<'_>,
    ) {
        self.separate();
        write_event(&mut self.json, id, event_type, time, previous_status, data);
    }

    /// Appends an event encoded before: [`EventArrayWriter::last_event`],
    /// or [`encode_event`]'s.
    pub fn push_encoded(&mut self, event: &str) {
        self.separate();
        self.json.extend_from_slice(event.as_bytes());
    }

    /// How many events were appended.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The JSON of the event appended last (empty before the first).
    pub fn last_event(&self) -> &str {
        // Only UTF-8 is written (see `encode_event`), and an event starts
        // and ends on ASCII.
        std::str::from_utf8(&self.json[self.last..]).expect("JSON written from strs is UTF-8")
    }

    /// Starts the next event.
    fn separate(&mut self) {
        if self.count > 0 {
            self.json.push(b',');
        }
        self.last = self.json.len();
        self.count += 1;
    }

    /// The array.
    pub fn finish(mut self) -> EncodedEvents {
        self.json.push(b']');
        EncodedEvents {
            json: self.json,
            count: self.count,
        }
    }
}

/// The event that `Event::new` makes of these, as serde writes it: the
/// body of a webhook delivery.
pub fn encode_event(
    id: i64,
    event_type: EventType,
    time: &DateTime<Utc>,
    previous_status: Option<PetStatus>,
    data: EventDataRef<'_>,
) -> String {
    let mut json = Vec::with_capacity(320);
    write_event(&mut json, id, event_type, time, previous_status, data);
    // Only UTF-8 was written: fixed ASCII, numbers, and serde_json's
    // escaping of `str`s.
    String::from_utf8(json).expect("JSON written from strs is UTF-8")
}

/// An [`super::Event`] in serde's field order: `previousstatus` left out
/// when absent, `data` as its resource.
fn write_event(
    json: &mut Vec<u8>,
    id: i64,
    event_type: EventType,
    time: &DateTime<Utc>,
    previous_status: Option<PetStatus>,
    data: EventDataRef<'_>,
) {
    // The fixed attributes are written as one text each (a test holds them
    // to `CLOUDEVENTS_SPEC_VERSION`, `EVENT_SOURCE` and
    // `EVENT_DATA_CONTENT_TYPE`, through serde's bytes).
    let mut number = itoa::Buffer::new();
    json.extend_from_slice(b"{\"specversion\":\"1.0\",\"id\":\"");
    json.extend_from_slice(number.format(id).as_bytes());
    json.extend_from_slice(b"\",\"source\":\"/v1\",\"type\":\"");
    json.extend_from_slice(event_type.as_str().as_bytes());
    let subject: (&[u8], i64) = match data {
        EventDataRef::Pet { id, .. } => (b"\",\"subject\":\"pets/", id),
        EventDataRef::Order(order) => (b"\",\"subject\":\"store/orders/", order.id),
    };
    json.extend_from_slice(subject.0);
    json.extend_from_slice(number.format(subject.1).as_bytes());
    json.extend_from_slice(b"\",\"time\":");
    write_time(json, time);
    json.extend_from_slice(b",\"datacontenttype\":\"application/json\"");
    if let Some(status) = previous_status {
        json.extend_from_slice(b",\"previousstatus\":\"");
        json.extend_from_slice(status.as_str().as_bytes());
        json.push(b'"');
    }
    json.extend_from_slice(b",\"data\":");
    match data {
        EventDataRef::Pet {
            id,
            name,
            category_id,
            status,
        } => write_pet(json, id, name, category_id, status),
        EventDataRef::Order(order) => write_order(json, order),
    }
    json.push(b'}');
}

/// A [`Pet`] with these fields, as serde writes it: in [`Pet`]'s order,
/// `status` left out when absent, the name escaped by serde_json itself.
fn write_pet(json: &mut Vec<u8>, id: i64, name: &str, category_id: i64, status: Option<PetStatus>) {
    let mut number = itoa::Buffer::new();
    json.extend_from_slice(b"{\"id\":");
    json.extend_from_slice(number.format(id).as_bytes());
    json.extend_from_slice(b",\"name\":");
    write_str(json, name);
    json.extend_from_slice(b",\"categoryId\":");
    json.extend_from_slice(number.format(category_id).as_bytes());
    if let Some(status) = status {
        json.extend_from_slice(b",\"status\":\"");
        json.extend_from_slice(status.as_str().as_bytes());
        json.push(b'"');
    }
    json.push(b'}');
}

/// An [`Order`], as serde writes it: `placedBy` left out when absent.
fn write_order(json: &mut Vec<u8>, order: &Order) {
    let mut number = itoa::Buffer::new();
    json.extend_from_slice(b"{\"id\":");
    json.extend_from_slice(number.format(order.id).as_bytes());
    json.extend_from_slice(b",\"petId\":");
    json.extend_from_slice(number.format(order.pet_id).as_bytes());
    json.extend_from_slice(b",\"status\":\"");
    json.extend_from_slice(order.status.as_str().as_bytes());
    json.extend_from_slice(b"\",\"placedAt\":");
    write_time(json, &order.placed_at);
    if let Some(placed_by) = &order.placed_by {
        json.extend_from_slice(b",\"placedBy\":");
        write_str(json, placed_by);
    }
    json.push(b'}');
}

/// A time as the contract's `rfc3339_micros` serialises it.
fn write_time(json: &mut Vec<u8>, time: &DateTime<Utc>) {
    match write_rfc3339_micros(time) {
        Some(text) => {
            json.push(b'"');
            json.extend_from_slice(&text);
            json.push(b'"');
        }
        None => write_str(json, &time.to_rfc3339_opts(SecondsFormat::Micros, true)),
    }
}

/// A JSON string, escaped by serde_json.
fn write_str(json: &mut Vec<u8>, text: &str) {
    // Writing to a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *json, text);
}

#[cfg(test)]
mod tests {
    use super::super::{Event, OrderStatus};
    use super::*;

    fn pets() -> Vec<Pet> {
        let names = [
            "Rex",
            "",
            "quote \" and backslash \\ and slash /",
            "naïve café 🐕 \u{2028}",
            "tab\tnewline\ncontrol\u{1}",
        ];
        let statuses = [
            None,
            Some(PetStatus::Available),
            Some(PetStatus::Pending),
            Some(PetStatus::Sold),
        ];
        names
            .iter()
            .enumerate()
            .map(|(i, name)| Pet {
                id: [i64::MIN, -1, 0, 7, i64::MAX][i],
                name: (*name).to_owned(),
                category_id: [i64::MAX, 0, -5, 1, i64::MIN][i],
                status: statuses[i % statuses.len()],
            })
            .collect()
    }

    #[test]
    fn arrays_are_what_serde_writes() {
        let pets = pets();
        for n in 0..=pets.len() {
            let encoded = EncodedPets::from_pets(&pets[..n]);
            assert_eq!(encoded.last_id(), n.checked_sub(1).map(|i| pets[i].id));
            assert_eq!(
                String::from_utf8(encoded.into_bytes()).unwrap(),
                serde_json::to_string(&pets[..n]).unwrap()
            );
        }
    }

    /// What `Event::new` makes an event of.
    type EventParts = (i64, EventType, DateTime<Utc>, Option<PetStatus>, EventData);

    /// Events of every type and shape: each pet above, orders with and
    /// without `placedBy` in each status, times ordinary and beyond what
    /// the fast path writes (a leap second, a year past 9999).
    fn events() -> Vec<EventParts> {
        use chrono::{NaiveDate, TimeZone};
        let leap_second = NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|day| day.and_hms_micro_opt(23, 59, 59, 1_500_000))
            .expect("a leap second")
            .and_utc();
        let times = [
            Utc.timestamp_opt(1_795_305_600, 123_456_789).unwrap(),
            Utc.timestamp_opt(0, 0).unwrap(),
            leap_second,
            Utc.with_ymd_and_hms(12_345, 6, 7, 8, 9, 10).unwrap(),
        ];
        let statuses = [None, Some(PetStatus::Pending), Some(PetStatus::Sold)];
        let mut events = Vec::new();
        for (i, pet) in pets().into_iter().enumerate() {
            let event_type = [EventType::PetCreated, EventType::PetStatusChanged][i % 2];
            let previous = statuses[i % statuses.len()];
            events.push((
                i64::MAX - i as i64,
                event_type,
                times[i % times.len()],
                previous,
                EventData::Pet(pet),
            ));
        }
        let placed_by = [
            None,
            Some("customer \"q\" \\ é".to_owned()),
            Some(String::new()),
        ];
        for (i, status) in OrderStatus::ALL.into_iter().enumerate() {
            let order = Order {
                id: [i64::MIN, 0, 42][i],
                pet_id: [7, i64::MAX, -1][i],
                status,
                placed_at: times[(i + 1) % times.len()],
                placed_by: placed_by[i].clone(),
            };
            let event_type = [
                EventType::OrderPlaced,
                EventType::OrderDelivered,
                EventType::OrderCancelled,
            ][i];
            events.push((
                i as i64,
                event_type,
                times[i],
                None,
                EventData::Order(order),
            ));
        }
        events
    }

    #[test]
    fn events_are_what_serde_writes() {
        let events = events();
        let contract: Vec<Event> = events
            .iter()
            .map(|(id, event_type, time, previous, data)| {
                Event::new(*id, *event_type, *time, *previous, data.clone())
            })
            .collect();
        for n in 0..=events.len() {
            let mut array = EventArrayWriter::with_capacity(n);
            let mut copy = EventArrayWriter::with_capacity(n);
            for (id, event_type, time, previous, data) in &events[..n] {
                array.push(*id, *event_type, time, *previous, data.into());
                let encoded = encode_event(*id, *event_type, time, *previous, data.into());
                assert_eq!(array.last_event(), encoded);
                copy.push_encoded(array.last_event());
            }
            let copy = copy.finish();
            assert_eq!(copy.is_empty(), n == 0);
            assert_eq!(
                String::from_utf8(copy.into_bytes()).unwrap(),
                serde_json::to_string(&contract[..n]).unwrap()
            );
            let array = array.finish();
            assert_eq!(array.is_empty(), n == 0);
            assert_eq!(
                String::from_utf8(array.into_bytes()).unwrap(),
                serde_json::to_string(&contract[..n]).unwrap()
            );
        }
        for ((id, event_type, time, previous, data), event) in events.iter().zip(&contract) {
            assert_eq!(
                encode_event(*id, *event_type, time, *previous, data.into()),
                serde_json::to_string(event).unwrap()
            );
        }
    }
}
