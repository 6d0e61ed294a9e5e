//! Pets already encoded as the contract's JSON, so that a store can write a
//! response body straight from its rows, without a [`Pet`] (and a `String`
//! per name) in between.
//!
//! The bytes are exactly what serde gives for the same [`Pet`]s; the unit
//! tests hold the two side by side.

use super::{Pet, PetStatus};

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
        let json = &mut self.json;
        if self.count > 0 {
            json.push(b',');
        }
        let mut number = itoa::Buffer::new();
        json.extend_from_slice(b"{\"id\":");
        json.extend_from_slice(number.format(id).as_bytes());
        json.extend_from_slice(b",\"name\":");
        // Writing to a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut *json, name);
        json.extend_from_slice(b",\"categoryId\":");
        json.extend_from_slice(number.format(category_id).as_bytes());
        if let Some(status) = status {
            json.extend_from_slice(b",\"status\":\"");
            json.extend_from_slice(status.as_str().as_bytes());
            json.push(b'"');
        }
        json.push(b'}');
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

#[cfg(test)]
mod tests {
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
}
