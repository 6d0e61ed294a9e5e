//! The mutation tests of the drift check: each edit of a copy of the
//! committed YAML that changes what it means must make the check fail (for
//! the right reason: an expected line must be among the differences), and
//! each edit that changes only how it is written must leave it passing.
//!
//! Edits are made on the parsed YAML (`serde_yaml::Value`), which fails
//! loudly when a key it edits is missing, so no mutation can silently turn
//! into no change; the re-quoting test edits the text itself.

use serde_yaml::Value;

use super::check_contract;
use crate::yaml_edit::{at, contract, contract_text, map, param, yaml};

async fn differences_text(text: &str) -> Vec<String> {
    let report = check_contract(text).await.expect("the check runs");
    report.differences.iter().map(ToString::to_string).collect()
}

async fn differences(doc: &Value) -> Vec<String> {
    differences_text(&serde_yaml::to_string(doc).expect("YAML out")).await
}

/// The check fails, with a difference containing each of `expected`.
async fn caught(doc: Value, expected: &[&str]) {
    let found = differences(&doc).await;
    // Shown with --nocapture: what the check says about the mutation.
    println!("{}", found.join("\n"));
    assert!(!found.is_empty(), "the mutation went unnoticed");
    for needle in expected {
        assert!(
            found.iter().any(|line| line.contains(needle)),
            "no difference mentions {needle:?}; found:\n{}",
            found.join("\n")
        );
    }
}

/// The check passes.
async fn clean(doc: Value) {
    let found = differences(&doc).await;
    assert!(
        found.is_empty(),
        "unexpected differences:\n{}",
        found.join("\n")
    );
}

// ---- The committed contract, and edits of representation only ----

#[tokio::test]
async fn the_committed_contract_passes() {
    let found = differences_text(&contract_text()).await;
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[tokio::test]
async fn reserialised_yaml_passes() {
    clean(contract()).await;
}

#[tokio::test]
async fn reordered_keys_pass() {
    fn reverse(value: &mut Value) {
        match value {
            Value::Mapping(mapping) => {
                let entries: Vec<(Value, Value)> = std::mem::take(mapping).into_iter().collect();
                for (key, mut value) in entries.into_iter().rev() {
                    reverse(&mut value);
                    mapping.insert(key, value);
                }
            }
            Value::Sequence(items) => items.iter_mut().for_each(reverse),
            _ => {}
        }
    }
    let mut doc = contract();
    reverse(&mut doc);
    clean(doc).await;
}

#[tokio::test]
async fn changed_descriptions_summaries_and_examples_pass() {
    fn rewrite(value: &mut Value) {
        match value {
            Value::Mapping(mapping) => {
                for (key, value) in mapping.iter_mut() {
                    match key.as_str() {
                        Some("description" | "summary" | "title") if value.is_string() => {
                            *value = Value::from("Rewritten.");
                        }
                        Some("example") => *value = Value::from("rewritten"),
                        _ => rewrite(value),
                    }
                }
            }
            Value::Sequence(items) => items.iter_mut().for_each(rewrite),
            _ => {}
        }
    }
    let mut doc = contract();
    rewrite(&mut doc);
    clean(doc).await;
}

#[tokio::test]
async fn requoted_strings_pass() {
    let mut text = contract_text();
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
        text = text.replace(from, to);
    }
    let found = differences_text(&text).await;
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[tokio::test]
async fn sorted_required_lists_and_enums_pass() {
    let mut doc = contract();
    for (schema, key) in [
        ("Pet", "required"),
        ("NewPet", "required"),
        ("Error", "required"),
        ("PetStatus", "enum"),
    ] {
        let list = at(&mut doc, &["components", "schemas", schema, key])
            .as_sequence_mut()
            .expect("a list");
        list.reverse();
    }
    clean(doc).await;
}

#[tokio::test]
async fn inline_schemas_moved_into_components_pass() {
    let mut doc = contract();
    let id_schema = std::mem::replace(
        at(
            param(&mut doc, "/pets/{petId}", "get", "petId"),
            &["schema"],
        ),
        yaml("$ref: '#/components/schemas/PetId'"),
    );
    let list_schema = std::mem::replace(
        at(
            &mut doc,
            &[
                "paths",
                "/pets",
                "get",
                "responses",
                "200",
                "content",
                "application/json",
                "schema",
            ],
        ),
        yaml("$ref: '#/components/schemas/PetList'"),
    );
    let schemas = map(&mut doc, &["components", "schemas"]);
    schemas.insert("PetId".into(), id_schema);
    schemas.insert("PetList".into(), list_schema);
    clean(doc).await;
}

#[tokio::test]
async fn references_inlined_pass() {
    let mut doc = contract();
    let status = at(&mut doc, &["components", "schemas", "PetStatus"]).clone();
    let new_pet = at(&mut doc, &["components", "schemas", "NewPet"]).clone();
    let not_found = at(&mut doc, &["components", "responses", "NotFound"]).clone();
    *at(
        &mut doc,
        &["components", "schemas", "NewPet", "properties", "status"],
    ) = status.clone();
    *at(param(&mut doc, "/pets", "get", "status"), &["schema"]) = status;
    *at(
        &mut doc,
        &[
            "paths",
            "/pets",
            "post",
            "requestBody",
            "content",
            "application/json",
            "schema",
        ],
    ) = new_pet;
    *at(
        &mut doc,
        &["paths", "/pets/{petId}", "get", "responses", "404"],
    ) = not_found;
    clean(doc).await;
}

#[tokio::test]
async fn optional_fields_written_as_all_of_wrappers_pass() {
    let mut doc = contract();
    *at(
        &mut doc,
        &["components", "schemas", "Pet", "properties", "status"],
    ) = yaml(
        "allOf: [{$ref: '#/components/schemas/PetStatus'}]\ndescription: Availability.\nnullable: true",
    );
    *at(
        &mut doc,
        &["components", "schemas", "NewPet", "properties", "status"],
    ) = yaml("allOf: [{$ref: '#/components/schemas/PetStatus'}]\ndescription: Availability.");
    clean(doc).await;
}

#[tokio::test]
async fn security_stated_only_globally_passes() {
    let mut doc = contract();
    for (path, method) in [
        ("/pets", "get"),
        ("/pets", "post"),
        ("/pets/{petId}", "get"),
    ] {
        map(&mut doc, &["paths", path, method])
            .remove("security")
            .expect("operation security");
    }
    clean(doc).await;
}

#[tokio::test]
async fn other_hosts_with_the_same_prefix_pass() {
    let mut doc = contract();
    *at(&mut doc, &["servers"]) = yaml(
        "- url: http://localhost:8080/v1/\n- url: '{scheme}://eu.example/{version}'\n  variables:\n    scheme: {default: https}\n    version: {default: v1}",
    );
    clean(doc).await;
}

// ---- Edits of meaning: each must fail the check ----

#[tokio::test]
async fn limit_maximum_lowered() {
    let mut doc = contract();
    *at(
        param(&mut doc, "/pets", "get", "limit"),
        &["schema", "maximum"],
    ) = 50.into();
    caught(
        doc,
        &[
            "paths./pets.get.parameters.limit.schema: maximum: yaml 50, server 100",
            "(above maximum 50): yaml expects 400, server answered 200",
        ],
    )
    .await;
}

#[tokio::test]
async fn limit_minimum_lowered() {
    let mut doc = contract();
    *at(
        param(&mut doc, "/pets", "get", "limit"),
        &["schema", "minimum"],
    ) = 0.into();
    caught(
        doc,
        &[
            "paths./pets.get.parameters.limit.schema: minimum: yaml 0, server 1",
            "limit=\"0\" (the edge of minimum 0): the yaml allows it, server answered 400",
        ],
    )
    .await;
}

#[tokio::test]
async fn limit_default_changed() {
    let mut doc = contract();
    *at(
        param(&mut doc, "/pets", "get", "limit"),
        &["schema", "default"],
    ) = 10.into();
    caught(
        doc,
        &["paths./pets.get.parameters.limit: default: yaml 10, server returned 13 items"],
    )
    .await;
}

#[tokio::test]
async fn get_pet_no_longer_deprecated() {
    let mut doc = contract();
    map(&mut doc, &["paths", "/pets/{petId}", "get"])
        .remove("deprecated")
        .expect("deprecated");
    caught(
        doc,
        &["paths./pets/{petId}.get: deprecated: yaml false, server true"],
    )
    .await;
}

#[tokio::test]
async fn create_pet_renamed() {
    let mut doc = contract();
    *at(&mut doc, &["paths", "/pets", "post", "operationId"]) = "addPet".into();
    caught(
        doc,
        &["paths./pets.post: operationId: yaml \"addPet\", server \"createPet\""],
    )
    .await;
}

#[tokio::test]
async fn new_pet_status_required() {
    let mut doc = contract();
    at(&mut doc, &["components", "schemas", "NewPet", "required"])
        .as_sequence_mut()
        .expect("a list")
        .push("status".into());
    caught(
        doc,
        &[
            "components.schemas.NewPet: required: yaml [\"categoryId\",\"name\",\"status\"], server [\"categoryId\",\"name\"]",
            "a body without the required status: yaml expects 400, server answered 201",
        ],
    )
    .await;
}

#[tokio::test]
async fn category_id_narrowed_to_int32() {
    let mut doc = contract();
    *at(
        &mut doc,
        &[
            "components",
            "schemas",
            "NewPet",
            "properties",
            "categoryId",
            "format",
        ],
    ) = "int32".into();
    caught(
        doc,
        &[
            "components.schemas.NewPet.properties.categoryId: format: yaml \"int32\", server \"int64\"",
            "categoryId = 2147483648 (above the int32 range): yaml expects 400, server answered 201",
        ],
    )
    .await;
}

#[tokio::test]
async fn pet_status_gains_a_value() {
    let mut doc = contract();
    at(&mut doc, &["components", "schemas", "PetStatus", "enum"])
        .as_sequence_mut()
        .expect("a list")
        .push("reserved".into());
    caught(
        doc,
        &[
            "components.schemas.PetStatus: enum: yaml [\"available\",\"pending\",\"reserved\",\"sold\"]",
            "status=\"reserved\" (the enum value \"reserved\"): the yaml allows it, server answered 400",
        ],
    )
    .await;
}

#[tokio::test]
async fn create_pet_answers_200() {
    let mut doc = contract();
    let responses = map(&mut doc, &["paths", "/pets", "post", "responses"]);
    let created = responses.remove("201").expect("a 201");
    responses.insert("200".into(), created);
    caught(
        doc,
        &[
            "paths./pets.post.responses: 200: yaml {",
            "paths./pets.post.responses.200: probe a valid request: yaml expects 200, server answered 201",
        ],
    )
    .await;
}

#[tokio::test]
async fn list_pets_unsecured() {
    let mut doc = contract();
    *at(&mut doc, &["paths", "/pets", "get", "security"]) = yaml("[]");
    caught(
        doc,
        &["paths./pets.get.security: the yaml requires no credentials, but the server answered 401"],
    )
    .await;
}

#[tokio::test]
async fn list_pets_gains_a_query_parameter() {
    let mut doc = contract();
    at(&mut doc, &["paths", "/pets", "get", "parameters"])
        .as_sequence_mut()
        .expect("a list")
        .push(yaml(
            "name: sort\nin: query\nschema: {type: string, enum: [name, id]}",
        ));
    caught(
        doc,
        &["paths./pets.get.parameters: sort: yaml {", "server absent"],
    )
    .await;
}

#[tokio::test]
async fn path_parameter_renamed() {
    let mut doc = contract();
    let paths = map(&mut doc, &["paths"]);
    let item = paths.remove("/pets/{petId}").expect("the item path");
    paths.insert("/pets/{id}".into(), item);
    *at(param(&mut doc, "/pets/{id}", "get", "petId"), &["name"]) = "id".into();
    caught(
        doc,
        &[
            "paths: /pets/{id}: yaml [\"get\"], server absent",
            "paths: /pets/{petId}: yaml absent, server [\"get\"]",
        ],
    )
    .await;
}

#[tokio::test]
async fn pet_gains_a_required_property() {
    let mut doc = contract();
    let pet = map(&mut doc, &["components", "schemas", "Pet"]);
    pet["required"]
        .as_sequence_mut()
        .expect("a list")
        .push("owner".into());
    pet["properties"]
        .as_mapping_mut()
        .expect("properties")
        .insert("owner".into(), yaml("type: string"));
    caught(
        doc,
        &[
            "components.schemas.Pet.properties: owner: yaml {\"type\":\"string\"}, server absent",
            "body: the required \"owner\" is missing",
        ],
    )
    .await;
}

#[tokio::test]
async fn error_status_no_longer_required() {
    let mut doc = contract();
    at(&mut doc, &["components", "schemas", "Error", "required"])
        .as_sequence_mut()
        .expect("a list")
        .retain(|name| name.as_str() != Some("status"));
    caught(
        doc,
        &["components.schemas.Error: required: yaml [\"code\",\"message\"], server [\"code\",\"message\",\"status\"]"],
    )
    .await;
}

#[tokio::test]
async fn sunset_header_made_optional() {
    let mut doc = contract();
    *at(
        &mut doc,
        &[
            "paths",
            "/pets/{petId}",
            "get",
            "responses",
            "200",
            "headers",
            "Sunset",
            "required",
        ],
    ) = false.into();
    caught(doc, &["paths./pets/{petId}.get.responses.200.headers.sunset: required: yaml false, server true"]).await;
}

#[tokio::test]
async fn list_pets_declares_a_header_it_does_not_send() {
    let mut doc = contract();
    map(&mut doc, &["paths", "/pets", "get", "responses", "200"]).insert(
        "headers".into(),
        yaml("X-Total-Count: {required: true, schema: {type: integer}}"),
    );
    caught(
        doc,
        &[
            "paths./pets.get.responses.200.headers: x-total-count: yaml {",
            "paths./pets.get.responses.200: headers.x-total-count: required by the yaml, missing from the server's answer",
        ],
    )
    .await;
}

#[tokio::test]
async fn link_header_schema_changed() {
    let mut doc = contract();
    *at(
        &mut doc,
        &[
            "paths",
            "/pets/{petId}",
            "get",
            "responses",
            "200",
            "headers",
            "Link",
            "schema",
            "type",
        ],
    ) = "integer".into();
    caught(doc, &["paths./pets/{petId}.get.responses.200.headers.link.schema: type: yaml \"integer\", server \"string\""]).await;
}

#[tokio::test]
async fn get_pet_drops_404() {
    let mut doc = contract();
    map(&mut doc, &["paths", "/pets/{petId}", "get", "responses"])
        .remove("404")
        .expect("a 404");
    caught(
        doc,
        &["server answered 404, which the yaml does not declare for getPet"],
    )
    .await;
}

#[tokio::test]
async fn create_pet_drops_413() {
    let mut doc = contract();
    map(&mut doc, &["paths", "/pets", "post", "responses"])
        .remove("413")
        .expect("a 413");
    caught(
        doc,
        &["a 1 MiB body: server answered 413, which the yaml does not declare for createPet"],
    )
    .await;
}

#[tokio::test]
async fn list_pets_drops_401() {
    let mut doc = contract();
    map(&mut doc, &["paths", "/pets", "get", "responses"])
        .remove("401")
        .expect("a 401");
    caught(doc, &["paths./pets.get.security: probe a request without credentials: server answered 401, which the yaml does not declare"]).await;
}

// Only writes can be made to fail from outside: the SQLite store serves
// reads from memory, so with the database broken getPet still answers 200
// and a 503 dropped from a read operation is not observable on SQLite.
#[tokio::test]
async fn create_pet_drops_503() {
    let mut doc = contract();
    map(&mut doc, &["paths", "/pets", "post", "responses"])
        .remove("503")
        .expect("a 503");
    caught(doc, &["while the database is broken: server answered 503, which the yaml does not declare for createPet"]).await;
}

#[tokio::test]
async fn get_pet_404_carries_another_schema() {
    let mut doc = contract();
    *at(
        &mut doc,
        &["paths", "/pets/{petId}", "get", "responses", "404"],
    ) = yaml(
        "description: Not found.\ncontent:\n  application/json:\n    schema: {$ref: '#/components/schemas/Pet'}",
    );
    caught(
        doc,
        &["paths./pets/{petId}.get.responses.404 (server 4XX).content.application/json.schema"],
    )
    .await;
}

#[tokio::test]
async fn name_pattern_changed() {
    let mut doc = contract();
    *at(
        &mut doc,
        &[
            "components",
            "schemas",
            "NewPet",
            "properties",
            "name",
            "pattern",
        ],
    ) = "^[a-z]*$".into();
    caught(
        doc,
        &["components.schemas.NewPet.properties.name: pattern: yaml \"^[a-z]*$\""],
    )
    .await;
}

#[tokio::test]
async fn name_max_length_lowered() {
    let mut doc = contract();
    *at(
        &mut doc,
        &[
            "components",
            "schemas",
            "NewPet",
            "properties",
            "name",
            "maxLength",
        ],
    ) = 128.into();
    caught(
        doc,
        &[
            "components.schemas.NewPet.properties.name: maxLength: yaml 128, server 255",
            "(longer than maxLength 128): yaml expects 400, server answered 201",
        ],
    )
    .await;
}

#[tokio::test]
async fn request_body_made_optional() {
    let mut doc = contract();
    *at(
        &mut doc,
        &["paths", "/pets", "post", "requestBody", "required"],
    ) = false.into();
    caught(
        doc,
        &["paths./pets.post.requestBody: required: yaml false, server true"],
    )
    .await;
}

#[tokio::test]
async fn new_pet_accepts_unknown_fields() {
    let mut doc = contract();
    map(&mut doc, &["components", "schemas", "NewPet"])
        .remove("additionalProperties")
        .expect("additionalProperties");
    caught(
        doc,
        &["components.schemas.NewPet: additionalProperties: yaml absent, server false"],
    )
    .await;
}

#[tokio::test]
async fn new_pet_status_made_nullable() {
    // Statically a nullable optional wrapper is schemars' representation of
    // `Option<T>`; the probe finds out that the server rejects `null`.
    let mut doc = contract();
    *at(
        &mut doc,
        &["components", "schemas", "NewPet", "properties", "status"],
    ) = yaml("allOf: [{$ref: '#/components/schemas/PetStatus'}]\nnullable: true");
    caught(doc, &["a body with status = null (null, which the schema allows (nullable)): the yaml allows it, server answered 400"]).await;
}

#[tokio::test]
async fn error_status_becomes_a_string() {
    let mut doc = contract();
    *at(
        &mut doc,
        &["components", "schemas", "Error", "properties", "status"],
    ) = yaml("type: string");
    caught(
        doc,
        &[
            "components.schemas.Error.properties.status: type: yaml \"string\", server \"integer\"",
            "body.status: 404 is not a string",
        ],
    )
    .await;
}

#[tokio::test]
async fn servers_disagree_on_the_prefix() {
    let mut doc = contract();
    at(&mut doc, &["servers"])
        .as_sequence_mut()
        .expect("a list")
        .push(yaml("url: https://beta.api.petstore.example/v2"));
    caught(doc, &["servers: the servers disagree on the path prefix"]).await;
}

#[tokio::test]
async fn all_servers_move_to_another_prefix() {
    let mut doc = contract();
    *at(&mut doc, &["servers"]) = yaml("- url: https://api.petstore.example/v2");
    caught(
        doc,
        &[
            "paths: /pets: yaml [\"get\",\"post\"], server absent",
            "paths: /v1/pets: yaml absent",
        ],
    )
    .await;
}

#[tokio::test]
async fn nothing_secured() {
    let mut doc = contract();
    map(&mut doc, &[])
        .remove("security")
        .expect("global security");
    for (path, method) in [
        ("/pets", "get"),
        ("/pets", "post"),
        ("/pets/{petId}", "get"),
    ] {
        map(&mut doc, &["paths", path, method])
            .remove("security")
            .expect("operation security");
    }
    caught(doc, &["paths./pets.post.security: the yaml requires no credentials, but the server answered 401"]).await;
}

#[tokio::test]
async fn an_operation_the_server_lacks() {
    let mut doc = contract();
    map(&mut doc, &["paths", "/pets/{petId}"]).insert(
        "delete".into(),
        yaml("operationId: deletePet\nparameters: [{name: petId, in: path, required: true, schema: {type: integer}}]\nresponses: {'204': {description: Gone.}}"),
    );
    caught(
        doc,
        &["paths./pets/{petId}: delete: yaml {\"operationId\":\"deletePet\"}, server absent"],
    )
    .await;
}

#[tokio::test]
async fn list_pets_answers_xml() {
    let mut doc = contract();
    let content = map(
        &mut doc,
        &["paths", "/pets", "get", "responses", "200", "content"],
    );
    let json = content.remove("application/json").expect("JSON content");
    content.insert("application/xml".into(), json);
    caught(
        doc,
        &[
            "paths./pets.get.responses.200.content: application/xml: yaml {",
            "server answered with content type \"application/json\", yaml declares [\"application/xml\"]",
        ],
    )
    .await;
}

#[tokio::test]
async fn version_bumped() {
    let mut doc = contract();
    *at(&mut doc, &["info", "version"]) = "9.9.9".into();
    let expected = format!(
        "info: version: yaml \"9.9.9\", server \"{}\"",
        petstore_api::CONTRACT_VERSION
    );
    caught(doc, &[&expected]).await;
}

#[tokio::test]
async fn limit_widened_to_int64() {
    let mut doc = contract();
    *at(
        param(&mut doc, "/pets", "get", "limit"),
        &["schema", "format"],
    ) = "int64".into();
    caught(
        doc,
        &["paths./pets.get.parameters.limit.schema: format: yaml \"int64\", server \"int32\""],
    )
    .await;
}
