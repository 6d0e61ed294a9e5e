//! The mutation table of the drift check: each edit of a copy of the
//! committed YAML that changes what it means must make the check fail for
//! the right reason (each expected line is among the differences), and each
//! edit that changes only how it is written must leave it passing. (Edits
//! only schemathesis can catch, such as a 401 or 404 no longer declared, are
//! `cargo xtask conformance`'s, and not here.)
//!
//! Edits are made on the parsed YAML with [`crate::yaml_edit`], which fails
//! loudly when what an edit names is missing; the re-quoting edit works on
//! the text itself.

use serde_norway::Value;

use super::check_contract;
use crate::yaml_edit::{at, contract_text, insert, list, remove, set, yaml};

/// An edit of the committed contract, on its text or on its parsed form.
enum Edit {
    Text(fn(&mut String)),
    Doc(fn(&mut Value)),
}

/// One row: a name, an edit, and the lines the check must report (none: the
/// check must pass).
type Mutation = (&'static str, Edit, &'static [&'static str]);

const OPERATIONS: [&str; 3] = ["/pets.get", "/pets.post", "/pets/{petId}.get"];
const LIMIT: &str = "paths./pets.get.parameters.limit.schema";
const NEW_PET: &str = "components.schemas.NewPet";

/// The table, a row a line (or a few): rustfmt would spread each row over a screen.
#[rustfmt::skip]
fn mutations() -> Vec<Mutation> {
    use Edit::{Doc, Text};
    vec![
        // The committed contract, and edits of representation only.
        ("the committed contract", Text(|_| {}), &[]),
        ("re-serialised", Doc(|_| {}), &[]),
        ("keys reordered", Doc(reverse_keys), &[]),
        ("descriptions, summaries and examples rewritten", Doc(reword), &[]),
        ("strings re-quoted", Text(requote), &[]),
        ("required lists and enums reordered", Doc(|d| {
            for path in ["Pet.required", "NewPet.required", "Error.required", "PetStatus.enum"] {
                list(d, &format!("components.schemas.{path}")).reverse();
            }
        }), &[]),
        ("inline schemas moved into components", Doc(|d| {
            let id = "paths./pets/{petId}.get.parameters.petId.schema";
            let id = std::mem::replace(at(d, id), yaml("$ref: '#/components/schemas/PetId'"));
            let list = "paths./pets.get.responses.200.content.application/json.schema";
            let list = std::mem::replace(at(d, list), yaml("$ref: '#/components/schemas/List'"));
            insert(d, "components.schemas.PetId", id);
            insert(d, "components.schemas.List", list);
        }), &[]),
        ("references inlined", Doc(|d| {
            let status = at(d, "components.schemas.PetStatus").clone();
            set(d, &format!("{NEW_PET}.properties.status"), status.clone());
            set(d, "paths./pets.get.parameters.status.schema", status);
            let new_pet = at(d, NEW_PET).clone();
            set(d, "paths./pets.post.requestBody.content.application/json.schema", new_pet);
            let not_found = at(d, "components.responses.NotFound").clone();
            set(d, "paths./pets/{petId}.get.responses.404", not_found);
        }), &[]),
        ("optional fields written as allOf wrappers", Doc(|d| {
            let wrapper = "{allOf: [{$ref: '#/components/schemas/PetStatus'}], description: A.";
            set(d, "components.schemas.Pet.properties.status", yaml(&format!("{wrapper}, nullable: true}}")));
            set(d, &format!("{NEW_PET}.properties.status"), yaml(&format!("{wrapper}}}")));
        }), &[]),
        ("security stated only globally", Doc(|d| {
            OPERATIONS.iter().for_each(|op| drop(remove(d, &format!("paths.{op}.security"))));
        }), &[]),
        ("other hosts with the same prefix", Doc(|d| set(d, "servers", yaml(
            "[{url: 'http://localhost:8080/v1/'}, {url: '{scheme}://eu.example/{version}', \
             variables: {scheme: {default: https}, version: {default: v1}}}]",
        ))), &[]),

        // Edits of meaning: each must fail the check.
        ("limit maximum lowered", Doc(|d| set(d, &format!("{LIMIT}.maximum"), 50)),
            &["paths./pets.get.parameters.limit.schema: maximum: yaml 50, server 100"]),
        ("limit minimum lowered", Doc(|d| set(d, &format!("{LIMIT}.minimum"), 0)),
            &["paths./pets.get.parameters.limit.schema: minimum: yaml 0, server 1"]),
        ("limit default changed", Doc(|d| set(d, &format!("{LIMIT}.default"), 10)),
            &["paths./pets.get.parameters.limit: default: yaml 10, server returned 20 items"]),
        ("limit widened to int64", Doc(|d| set(d, &format!("{LIMIT}.format"), "int64")),
            &["paths./pets.get.parameters.limit.schema: format: yaml \"int64\", server \"int32\""]),
        ("getPet no longer deprecated", Doc(|d| drop(remove(d, "paths./pets/{petId}.get.deprecated"))),
            &["paths./pets/{petId}.get: deprecated: yaml false, server true"]),
        ("createPet renamed", Doc(|d| set(d, "paths./pets.post.operationId", "addPet")),
            &["paths./pets.post: operationId: yaml \"addPet\", server \"createPet\""]),
        ("NewPet status required", Doc(|d| list(d, &format!("{NEW_PET}.required")).push("status".into())),
            &["components.schemas.NewPet: required: yaml [\"categoryId\",\"name\",\"status\"]"]),
        ("NewPet categoryId narrowed to int32", Doc(|d| set(d, &format!("{NEW_PET}.properties.categoryId.format"), "int32")),
            &["components.schemas.NewPet.properties.categoryId: format: yaml \"int32\", server \"int64\""]),
        ("PetStatus gains a value", Doc(|d| list(d, "components.schemas.PetStatus.enum").push("reserved".into())),
            &["components.schemas.PetStatus: enum: yaml [\"available\",\"pending\",\"reserved\",\"sold\"]"]),
        ("createPet answers 200", Doc(|d| {
            let created = remove(d, "paths./pets.post.responses.201");
            insert(d, "paths./pets.post.responses.200", created);
        }), &["paths./pets.post.responses: 200: yaml {", "paths./pets.post.responses: 201: yaml absent"]),
        ("listPets unsecured", Doc(|d| set(d, "paths./pets.get.security", yaml("[]"))),
            &["paths./pets.get.security: probe a request without credentials, which the yaml does not require: \
               yaml expects anything but 401, server answered 401"]),
        ("nothing secured", Doc(|d| {
            remove(d, "security");
            OPERATIONS.iter().for_each(|op| drop(remove(d, &format!("paths.{op}.security"))));
        }), &["paths./pets.post.security: probe a request without credentials, which the yaml does not require"]),
        ("listPets gains a query parameter", Doc(|d| list(d, "paths./pets.get.parameters").push(yaml(
            "{name: sort, in: query, schema: {type: string, enum: [name, id]}}",
        ))), &["paths./pets.get.parameters: sort: yaml {", "server absent"]),
        ("path parameter renamed", Doc(|d| {
            let item = remove(d, "paths./pets/{petId}");
            insert(d, "paths./pets/{id}", item);
            set(d, "paths./pets/{id}.get.parameters.petId.name", "id");
        }), &["paths: /pets/{id}: yaml [\"get\"], server absent", "paths: /pets/{petId}: yaml absent, server [\"get\"]"]),
        ("Pet gains a required property", Doc(|d| {
            list(d, "components.schemas.Pet.required").push("owner".into());
            insert(d, "components.schemas.Pet.properties.owner", yaml("type: string"));
        }), &["components.schemas.Pet.properties: owner: yaml {\"type\":\"string\"}, server absent"]),
        ("Error status no longer required", Doc(|d| list(d, "components.schemas.Error.required").retain(|n| n != "status")),
            &["components.schemas.Error: required: yaml [\"code\",\"message\"], server [\"code\",\"message\",\"status\"]"]),
        ("Error status becomes a string", Doc(|d| set(d, "components.schemas.Error.properties.status", yaml("type: string"))),
            &["components.schemas.Error.properties.status: type: yaml \"string\", server \"integer\"",
              "probe a 1 MiB body: body/status: 413 is not of type \"string\""]),
        ("Sunset header made optional", Doc(|d| set(d, "paths./pets/{petId}.get.responses.200.headers.Sunset.required", false)),
            &["paths./pets/{petId}.get.responses.200.headers.sunset: required: yaml false, server true"]),
        ("listPets declares a header it does not send", Doc(|d| insert(
            d, "paths./pets.get.responses.200.headers.X-Total-Count", yaml("{required: true, schema: {type: integer}}"),
        )), &["paths./pets.get.responses.200.headers: x-total-count: yaml {"]),
        ("a 401 declares a required header the server never sends", Doc(|d| insert(
            d, "components.responses.Unauthorized.headers.X-Challenge", yaml("{required: true, schema: {type: string}}"),
        )), &["paths./pets.get.security: probe a request without credentials: 401 header x-challenge: required, server sent none"]),
        ("a 413 header whose value the server sends outside its schema", Doc(|d| insert(
            d, "components.responses.PayloadTooLarge.headers.Content-Length", yaml("{required: true, schema: {type: string, pattern: '^0$'}}"),
        )), &["paths./pets.post.requestBody: probe a 1 MiB body: 413 header content-length: server sent"]),
        ("Link header schema changed", Doc(|d| set(d, "paths./pets/{petId}.get.responses.200.headers.Link.schema.type", "integer")),
            &["paths./pets/{petId}.get.responses.200.headers.link.schema: type: yaml \"integer\", server \"string\""]),
        ("createPet drops 413", Doc(|d| drop(remove(d, "paths./pets.post.responses.413"))),
            &["a 1 MiB body: server answered 413, which the yaml does not declare for createPet"]),
        // Only writes can be made to fail from outside: the SQLite store serves reads from memory, so with
        // the database broken getPet still answers 200, and a 503 dropped from a read is not observable.
        ("createPet drops 503", Doc(|d| drop(remove(d, "paths./pets.post.responses.503"))),
            &["while the database is broken: server answered 503, which the yaml does not declare for createPet"]),
        ("getPet's 404 carries another schema", Doc(|d| set(d, "paths./pets/{petId}.get.responses.404", yaml(
            "{description: N., content: {application/json: {schema: {$ref: '#/components/schemas/Pet'}}}}",
        ))), &["paths./pets/{petId}.get.responses.404 (server 4XX).content.application/json.schema"]),
        ("name pattern changed", Doc(|d| set(d, &format!("{NEW_PET}.properties.name.pattern"), "^[a-z]*$")),
            &["components.schemas.NewPet.properties.name: pattern: yaml \"^[a-z]*$\""]),
        ("name maxLength lowered", Doc(|d| set(d, &format!("{NEW_PET}.properties.name.maxLength"), 128)),
            &["components.schemas.NewPet.properties.name: maxLength: yaml 128, server 255"]),
        ("request body made optional", Doc(|d| set(d, "paths./pets.post.requestBody.required", false)),
            &["paths./pets.post.requestBody: required: yaml false, server true"]),
        ("NewPet accepts unknown fields", Doc(|d| drop(remove(d, &format!("{NEW_PET}.additionalProperties")))),
            &["components.schemas.NewPet: additionalProperties: yaml absent, server false"]),
        // Statically a nullable optional wrapper is schemars' `Option<T>`; the probe finds out that the
        // server refuses `null`.
        ("NewPet status made nullable", Doc(|d| set(d, &format!("{NEW_PET}.properties.status"), yaml(
            "{allOf: [{$ref: '#/components/schemas/PetStatus'}], nullable: true}",
        ))), &["probe a body with status = null, which the yaml allows (nullable): yaml expects 2xx, server answered 400"]),
        ("servers disagree on the prefix", Doc(|d| list(d, "servers").push(yaml("url: https://beta.api.petstore.example/v2"))),
            &["servers: the servers disagree on the path prefix"]),
        ("all servers move to another prefix", Doc(|d| set(d, "servers", yaml("[{url: 'https://api.petstore.example/v2'}]"))),
            &["paths: /pets: yaml [\"get\",\"post\"], server absent", "paths: /v1/pets: yaml absent"]),
        ("an operation the server lacks", Doc(|d| insert(d, "paths./pets/{petId}.delete", yaml(
            "{operationId: deletePet, responses: {'204': {description: Gone.}}, \
              parameters: [{name: petId, in: path, required: true, schema: {type: integer}}]}",
        ))), &["paths./pets/{petId}: delete: yaml {\"operationId\":\"deletePet\"}, server absent"]),
        ("listPets answers XML", Doc(|d| {
            let json = remove(d, "paths./pets.get.responses.200.content.application/json");
            insert(d, "paths./pets.get.responses.200.content.application/xml", json);
        }), &["paths./pets.get.responses.200.content: application/xml: yaml {"]),
        ("version bumped", Doc(|d| set(d, "info.version", "9.9.9")), &["info: version: yaml \"9.9.9\", server \""]),
    ]
}

#[tokio::test]
async fn each_mutation_is_caught_and_each_rewording_passes() {
    let mut wrong = Vec::new();
    for (name, edit, expected) in mutations() {
        let mut text = contract_text();
        match edit {
            Edit::Text(edit) => edit(&mut text),
            Edit::Doc(edit) => {
                let mut doc = yaml(&text);
                edit(&mut doc);
                text = serde_norway::to_string(&doc).expect("YAML out");
            }
        }
        let report = check_contract(&text).await.expect("the check runs");
        let found: Vec<String> = report.differences.iter().map(ToString::to_string).collect();
        // Shown with --nocapture: what the check says about each edit.
        println!("{name}:\n  {}", found.join("\n  "));
        let missing: Vec<&str> = expected
            .iter()
            .copied()
            .filter(|e| !found.iter().any(|f| f.contains(e)))
            .collect();
        if found.is_empty() != expected.is_empty() || !missing.is_empty() {
            wrong.push(format!(
                "{name}: expected {expected:?}, missing {missing:?}, found {found:#?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every mapping's keys in reverse order.
fn reverse_keys(value: &mut Value) {
    match value {
        Value::Mapping(mapping) => {
            let entries: Vec<(Value, Value)> = std::mem::take(mapping).into_iter().collect();
            for (key, mut value) in entries.into_iter().rev() {
                reverse_keys(&mut value);
                mapping.insert(key, value);
            }
        }
        Value::Sequence(items) => items.iter_mut().for_each(reverse_keys),
        _ => {}
    }
}

/// Every description, summary, title and example rewritten.
fn reword(value: &mut Value) {
    match value {
        Value::Mapping(mapping) => {
            for (key, value) in mapping.iter_mut() {
                match key.as_str() {
                    Some("description" | "summary" | "title") if value.is_string() => {
                        *value = "Rewritten.".into()
                    }
                    Some("example") => *value = "rewritten".into(),
                    _ => reword(value),
                }
            }
        }
        Value::Sequence(items) => items.iter_mut().for_each(reword),
        _ => {}
    }
}

/// Quoting changed: single, double and no quotes where YAML allows each.
fn requote(text: &mut String) {
    for (from, to) in [
        ("'200':", "200:"),
        ("'201':", "\"201\":"),
        ("'404':", "\"404\":"),
        (
            "$ref: '#/components/schemas/Pet'",
            "$ref: \"#/components/schemas/Pet\"",
        ),
        ("format: int64", "format: 'int64'"),
        ("type: integer", "type: \"integer\""),
        ("operationId: getPet", "operationId: 'getPet'"),
    ] {
        assert!(
            text.contains(from),
            "the contract no longer contains {from:?}"
        );
        *text = text.replace(from, to);
    }
}
