//! The catalogue of edits that proves the gate: each edit of the released
//! 1.0.0 document has the verdict it must get, and a line it must print.
//! Then the semver rule, on whole files.

use serde_yaml::Value;

use super::{Verdict, compare, gate, released_dir};
use crate::yaml_edit::{at, map, param, yaml};

/// The released 1.0.0 document, parsed.
fn released() -> Value {
    let text = std::fs::read_to_string(released_dir().join("petstore-1.0.0.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

fn api(doc: &Value) -> openapiv3::OpenAPI {
    serde_yaml::from_value(doc.clone()).expect("the edited document is OpenAPI")
}

/// The edit gets `verdict`, and some finding line contains `expected` (a
/// semantic-free edit has no finding at all).
fn judged(edit: impl FnOnce(&mut Value), verdict: Verdict, expected: &str) {
    let old = released();
    let mut new = old.clone();
    edit(&mut new);
    assert_ne!(old, new, "the edit changed nothing");
    let (findings, found) = compare(&api(&old), &api(&new));
    let lines: Vec<String> = findings.iter().map(ToString::to_string).collect();
    // Shown with --nocapture: what the gate says about the edit.
    println!("{}", lines.join("\n"));
    assert_eq!(found, verdict, "findings:\n{}", lines.join("\n"));
    if verdict == Verdict::SemanticFree {
        assert!(lines.is_empty(), "findings:\n{}", lines.join("\n"));
        return;
    }
    assert!(
        lines.iter().any(|line| line.contains(expected)),
        "no finding contains {expected:?}:\n{}",
        lines.join("\n")
    );
}

fn breaking(edit: impl FnOnce(&mut Value), expected: &str) {
    judged(edit, Verdict::Breaking, expected);
}

fn compatible(edit: impl FnOnce(&mut Value), expected: &str) {
    judged(edit, Verdict::Compatible, expected);
}

fn semantic_free(edit: impl FnOnce(&mut Value)) {
    judged(edit, Verdict::SemanticFree, "");
}

fn schema_of<'a>(doc: &'a mut Value, name: &str) -> &'a mut Value {
    at(doc, &["components", "schemas", name])
}

// Breaking: removals and renames.

#[test]
fn removing_the_deprecated_get_before_its_sunset_is_breaking() {
    breaking(
        |doc| drop(map(doc, &["paths"]).remove("/pets/{petId}")),
        "paths./pets/{petId}.get: deprecated operation removed before its sunset (Thu, 05 Dec 2030",
    );
}

#[test]
fn removing_an_operation_is_breaking() {
    breaking(
        |doc| drop(map(doc, &["paths", "/pets"]).remove("get")),
        "paths./pets.get: operation removed: breaking",
    );
}

#[test]
fn renaming_an_operation_id_is_breaking() {
    breaking(
        |doc| at(doc, &["paths", "/pets", "post"])["operationId"] = "addPet".into(),
        "paths./pets.post.operationId: createPet -> addPet",
    );
}

#[test]
fn removing_a_parameter_is_breaking() {
    breaking(
        |doc| {
            at(doc, &["paths", "/pets", "get", "parameters"])
                .as_sequence_mut()
                .unwrap()
                .retain(|p| p["name"] != "status")
        },
        "paths./pets.get.parameters.status: query parameter removed",
    );
}

#[test]
fn removing_a_property_is_breaking() {
    breaking(
        |doc| drop(map(schema_of(doc, "Pet"), &["properties"]).remove("categoryId")),
        "components.schemas.Pet.properties.categoryId: property removed",
    );
}

#[test]
fn removing_a_response_status_is_breaking() {
    breaking(
        |doc| drop(map(doc, &["paths", "/pets/{petId}", "get", "responses"]).remove("404")),
        "paths./pets/{petId}.get.responses.404: response removed",
    );
}

#[test]
fn removing_a_response_header_is_breaking() {
    breaking(
        |doc| {
            drop(
                map(
                    doc,
                    &[
                        "paths",
                        "/pets/{petId}",
                        "get",
                        "responses",
                        "200",
                        "headers",
                    ],
                )
                .remove("Deprecation"),
            )
        },
        "paths./pets/{petId}.get.responses.200.headers.deprecation: response header removed",
    );
}

#[test]
fn removing_the_request_body_is_breaking() {
    breaking(
        |doc| drop(map(doc, &["paths", "/pets", "post"]).remove("requestBody")),
        "paths./pets.post.requestBody: request body removed",
    );
}

// Breaking: new or stricter request inputs.

#[test]
fn a_new_required_parameter_is_breaking() {
    breaking(
        |doc| {
            at(doc, &["paths", "/pets", "get", "parameters"])
                .as_sequence_mut()
                .unwrap()
                .push(yaml(
                    "{name: owner, in: query, required: true, schema: {type: string}}",
                ))
        },
        "paths./pets.get.parameters.owner: new required query parameter",
    );
}

#[test]
fn making_an_optional_parameter_required_is_breaking() {
    breaking(
        |doc| param(doc, "/pets", "get", "limit")["required"] = true.into(),
        "paths./pets.get.parameters.limit.required: now required",
    );
}

#[test]
fn a_new_required_request_property_is_breaking() {
    breaking(
        |doc| {
            let new_pet = schema_of(doc, "NewPet");
            map(new_pet, &["properties"]).insert("ownerId".into(), yaml("{type: integer}"));
            at(new_pet, &["required"])
                .as_sequence_mut()
                .unwrap()
                .push("ownerId".into());
        },
        "components.schemas.NewPet.properties.ownerId: new required property",
    );
}

#[test]
fn making_an_optional_request_property_required_is_breaking() {
    breaking(
        |doc| {
            at(schema_of(doc, "NewPet"), &["required"])
                .as_sequence_mut()
                .unwrap()
                .push("status".into())
        },
        "components.schemas.NewPet.required.status: property now required (narrows what requests may send)",
    );
}

#[test]
fn lowering_a_request_maximum_is_breaking() {
    breaking(
        |doc| param(doc, "/pets", "get", "limit")["schema"]["maximum"] = 50.into(),
        "paths./pets.get.parameters.limit.schema.maximum: 100 -> 50 (narrows what requests may send): breaking",
    );
}

#[test]
fn raising_a_request_minimum_is_breaking() {
    breaking(
        |doc| param(doc, "/pets", "get", "limit")["schema"]["minimum"] = 5.into(),
        "paths./pets.get.parameters.limit.schema.minimum: 1 -> 5 (narrows what requests may send)",
    );
}

#[test]
fn shortening_a_request_max_length_is_breaking() {
    breaking(
        |doc| schema_of(doc, "NewPet")["properties"]["name"]["maxLength"] = 100.into(),
        "components.schemas.NewPet.properties.name.maxLength: 255 -> 100 (narrows",
    );
}

#[test]
fn narrowing_a_request_format_is_breaking() {
    breaking(
        |doc| schema_of(doc, "NewPet")["properties"]["categoryId"]["format"] = "int32".into(),
        "components.schemas.NewPet.properties.categoryId.format: \"int64\" -> \"int32\" (narrows",
    );
}

#[test]
fn changing_a_request_type_is_breaking() {
    breaking(
        |doc| {
            let category = &mut schema_of(doc, "NewPet")["properties"]["categoryId"];
            *category = yaml("{type: string}");
        },
        "components.schemas.NewPet.properties.categoryId.type: \"integer\" -> \"string\"",
    );
}

#[test]
fn changing_a_request_pattern_is_breaking() {
    breaking(
        |doc| schema_of(doc, "NewPet")["properties"]["name"]["pattern"] = "^[a-z]+$".into(),
        "components.schemas.NewPet.properties.name.pattern",
    );
}

#[test]
fn removing_an_enum_value_is_breaking() {
    breaking(
        |doc| {
            at(schema_of(doc, "PetStatus"), &["enum"])
                .as_sequence_mut()
                .unwrap()
                .retain(|v| v != "sold")
        },
        "components.schemas.PetStatus.enum: values removed: \"sold\" (narrows what requests may send)",
    );
}

#[test]
fn changing_a_default_is_breaking() {
    breaking(
        |doc| param(doc, "/pets", "get", "limit")["schema"]["default"] = 10.into(),
        "paths./pets.get.parameters.limit.schema.default: 20 -> 10 (changes what an omitted value means)",
    );
}

// Breaking: wider responses.

#[test]
fn a_new_enum_value_in_a_response_is_breaking() {
    breaking(
        |doc| {
            at(schema_of(doc, "PetStatus"), &["enum"])
                .as_sequence_mut()
                .unwrap()
                .push("adopted".into())
        },
        "components.schemas.PetStatus.enum: values added: \"adopted\" (generated clients' enums reject unknown values) (widens what responses may hold): breaking",
    );
}

#[test]
fn a_response_property_no_longer_required_is_breaking() {
    breaking(
        |doc| {
            at(schema_of(doc, "Pet"), &["required"])
                .as_sequence_mut()
                .unwrap()
                .retain(|v| v != "name")
        },
        "components.schemas.Pet.required.name: property no longer required (widens what responses may hold)",
    );
}

#[test]
fn a_wider_response_format_is_breaking() {
    breaking(
        |doc| schema_of(doc, "Error")["properties"]["status"]["format"] = "int64".into(),
        "components.schemas.Error.properties.status.format: \"int32\" -> \"int64\" (widens what responses may hold)",
    );
}

#[test]
fn a_wider_response_type_is_breaking() {
    breaking(
        |doc| schema_of(doc, "Pet")["properties"]["id"]["type"] = "number".into(),
        "components.schemas.Pet.properties.id.type: \"integer\" -> \"number\" (widens what responses may hold)",
    );
}

#[test]
fn a_new_success_status_is_breaking() {
    breaking(
        |doc| {
            let response = at(doc, &["paths", "/pets", "post", "responses", "201"]).clone();
            map(doc, &["paths", "/pets", "post", "responses"]).insert("200".into(), response);
        },
        "paths./pets.post.responses.200: new success response",
    );
}

#[test]
fn removing_security_is_a_semantic_change_and_breaking() {
    breaking(
        |doc| at(doc, &["paths", "/pets", "get"])["security"] = yaml("[]"),
        "paths./pets.get.security: [[\"bearerAuth\"]] -> [] (a semantic change",
    );
}

#[test]
fn changing_the_security_scheme_is_breaking() {
    breaking(
        |doc| {
            *at(doc, &["components", "securitySchemes", "bearerAuth"]) =
                yaml("{type: apiKey, in: header, name: X-Api-Key}")
        },
        "components.securitySchemes.bearerAuth: security scheme removed or changed",
    );
}

// Compatible.

#[test]
fn a_new_optional_parameter_is_compatible() {
    compatible(
        |doc| {
            at(doc, &["paths", "/pets", "get", "parameters"])
                .as_sequence_mut()
                .unwrap()
                .push(yaml("{name: after, in: query, required: false, schema: {type: integer, format: int64}}"))
        },
        "paths./pets.get.parameters.after: new optional query parameter: compatible",
    );
}

#[test]
fn a_new_operation_is_compatible() {
    compatible(
        |doc| {
            let get = at(doc, &["paths", "/pets/{petId}", "get"]).clone();
            let mut delete = get;
            delete["operationId"] = "deletePet".into();
            map(doc, &["paths", "/pets/{petId}"]).insert("delete".into(), delete);
        },
        "paths./pets/{petId}.delete: new operation: compatible",
    );
}

#[test]
fn a_new_response_header_is_compatible() {
    compatible(
        |doc| {
            map(doc, &["paths", "/pets", "get", "responses", "200"])
                .insert("headers".into(), yaml("{Link: {schema: {type: string}}}"));
        },
        "paths./pets.get.responses.200.headers.link: new response header: compatible",
    );
}

#[test]
fn a_new_error_status_is_compatible() {
    compatible(
        |doc| {
            let bad = at(doc, &["paths", "/pets", "post", "responses", "400"]).clone();
            map(doc, &["paths", "/pets", "post", "responses"]).insert("409".into(), bad);
        },
        "paths./pets.post.responses.409: new error response",
    );
}

#[test]
fn widening_request_bounds_is_compatible() {
    compatible(
        |doc| {
            param(doc, "/pets", "get", "limit")["schema"]["maximum"] = 500.into();
            schema_of(doc, "NewPet")["properties"]["name"]["maxLength"] = 1000.into();
        },
        "paths./pets.get.parameters.limit.schema.maximum: 100 -> 500 (widens what requests may send): compatible",
    );
}

#[test]
fn deprecating_an_operation_is_compatible() {
    compatible(
        |doc| at(doc, &["paths", "/pets", "post"])["deprecated"] = true.into(),
        "paths./pets.post.deprecated: now deprecated: compatible",
    );
}

#[test]
fn a_new_optional_request_property_is_compatible() {
    compatible(
        |doc| {
            map(schema_of(doc, "NewPet"), &["properties"])
                .insert("nickname".into(), yaml("{type: string}"));
        },
        "components.schemas.NewPet.properties.nickname: new optional property: compatible",
    );
}

#[test]
fn a_new_response_property_of_an_open_object_is_compatible() {
    compatible(
        |doc| {
            map(schema_of(doc, "Pet"), &["properties"])
                .insert("nickname".into(), yaml("{type: string}"));
        },
        "components.schemas.Pet.properties.nickname: new property (older clients ignore",
    );
}

#[test]
fn a_narrower_response_is_compatible() {
    compatible(
        |doc| schema_of(doc, "Pet")["properties"]["name"]["maxLength"] = 100.into(),
        "components.schemas.Pet.properties.name.maxLength: 255 -> 100 (narrows what responses may hold): compatible",
    );
}

#[test]
fn a_response_header_now_always_sent_is_compatible() {
    compatible(
        |doc| {
            map(doc, &["paths", "/pets", "get", "responses", "200"]).insert(
                "headers".into(),
                yaml("{X-Total: {required: false, schema: {type: string}}}"),
            );
        },
        "new response header",
    );
    let mut with_optional = released();
    map(
        &mut with_optional,
        &["paths", "/pets", "get", "responses", "200"],
    )
    .insert(
        "headers".into(),
        yaml("{X-Total: {required: false, schema: {type: string}}}"),
    );
    let mut with_required = with_optional.clone();
    at(
        &mut with_required,
        &[
            "paths",
            "/pets",
            "get",
            "responses",
            "200",
            "headers",
            "X-Total",
        ],
    )["required"] = true.into();
    let (findings, verdict) = compare(&api(&with_optional), &api(&with_required));
    assert_eq!(verdict, Verdict::Compatible, "{findings:?}");
    assert!(
        findings[0]
            .to_string()
            .contains("x-total.required: now always sent")
    );
}

#[test]
fn deprecating_a_parameter_is_compatible() {
    compatible(
        |doc| param(doc, "/pets", "get", "status")["deprecated"] = true.into(),
        "paths./pets.get.parameters.status.deprecated: false -> true: compatible",
    );
}

// Semantic-free.

#[test]
fn descriptions_summaries_and_examples_are_semantic_free() {
    semantic_free(|doc| {
        at(doc, &["paths", "/pets", "get"])["summary"] = "Browse the animals".into();
        at(doc, &["paths", "/pets", "get"])["description"] = "Other words.".into();
        schema_of(doc, "Pet")["description"] = "Reworded.".into();
        at(doc, &["info"])["title"] = "The Pet Store".into();
    });
}

#[test]
fn an_inlined_reference_is_semantic_free() {
    semantic_free(|doc| {
        let status = schema_of(doc, "PetStatus").clone();
        param(doc, "/pets", "get", "status")["schema"] = status;
    });
}

#[test]
fn reordered_required_lists_and_enums_are_semantic_free() {
    semantic_free(|doc| {
        at(schema_of(doc, "Pet"), &["required"])
            .as_sequence_mut()
            .unwrap()
            .reverse();
        at(schema_of(doc, "PetStatus"), &["enum"])
            .as_sequence_mut()
            .unwrap()
            .reverse();
    });
}

// The semver rule, on files.

/// Runs the gate on the released 1.0.0 edited by `edit`, at `version`.
/// The gate's failures for 1.0.0 changed by `edit` and versioned `version`,
/// against 1.0.0 as the only release (the rules are about one release;
/// later ones are covered by the committed contract's own test).
fn gate_with(version: &str, edit: impl FnOnce(&mut Value)) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let releases = dir.path().join("released");
    std::fs::create_dir(&releases).unwrap();
    std::fs::copy(
        released_dir().join("petstore-1.0.0.yaml"),
        releases.join("petstore-1.0.0.yaml"),
    )
    .unwrap();
    let mut doc = released();
    edit(&mut doc);
    doc["info"]["version"] = version.into();
    let contract = dir.path().join("petstore.yaml");
    std::fs::write(&contract, serde_yaml::to_string(&doc).unwrap()).unwrap();
    gate(&contract, &releases).unwrap().failures
}

fn add_optional_parameter(doc: &mut Value) {
    at(doc, &["paths", "/pets", "get", "parameters"])
        .as_sequence_mut()
        .unwrap()
        .push(yaml("{name: after, in: query, schema: {type: integer}}"));
}

fn lower_maximum(doc: &mut Value) {
    param(doc, "/pets", "get", "limit")["schema"]["maximum"] = 50.into();
}

#[test]
fn a_compatible_change_needs_a_minor_bump() {
    assert!(gate_with("1.1.0", add_optional_parameter).is_empty());
    assert!(gate_with("1.2.0", add_optional_parameter).is_empty());
    let failures = gate_with("1.0.1", add_optional_parameter);
    assert!(
        failures[0].contains("need info.version 1.1.0 or later"),
        "{failures:?}"
    );
    let failures = gate_with("1.0.0", add_optional_parameter);
    assert!(failures[0].contains("released already"), "{failures:?}");
}

#[test]
fn a_breaking_change_needs_a_new_major_version() {
    let failures = gate_with("1.1.0", lower_maximum);
    assert!(
        failures[0].contains("need a new major version (2.0.0)"),
        "{failures:?}"
    );
    assert!(gate_with("2.0.0", lower_maximum).is_empty());
}

#[test]
fn a_semantic_free_change_needs_only_a_patch_bump_and_versions_only_grow() {
    let reword = |doc: &mut Value| at(doc, &["info"])["title"] = "Pets".into();
    assert!(gate_with("1.0.1", reword).is_empty());
    assert!(
        gate_with("1.0.0", reword).is_empty(),
        "the release itself, reworded"
    );
    let failures = gate_with("0.9.0", reword);
    assert!(
        failures[0].contains("not greater than the released 1.0.0"),
        "{failures:?}"
    );
}

#[test]
fn every_release_is_checked_so_dropping_what_1_1_0_added_is_breaking() {
    // 1.0.0's document as 1.2.0: compatible with 1.0.0, but it removes the
    // `after` parameter and the `Link` header that 1.1.0 released.
    let dir = tempfile::tempdir().unwrap();
    let mut doc = released();
    doc["info"]["version"] = "1.2.0".into();
    let contract = dir.path().join("petstore.yaml");
    std::fs::write(&contract, serde_yaml::to_string(&doc).unwrap()).unwrap();
    let failures = gate(&contract, &released_dir()).unwrap().failures;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].contains("against released 1.1.0") && failures[0].contains("major"),
        "{failures:?}"
    );
}
