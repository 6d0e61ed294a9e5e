//! The catalogue of edits that proves the gate: each edit of the released
//! 1.0.0 document has the verdict it must get and a line it must print (the
//! table in `docs/compatibility.md`, where Oxide's `drift` crate was measured
//! on the same edits). Then the semver rule, on whole files.

use serde_norway::Value;

use super::{Verdict, compare, gate, released_dir};
use crate::yaml_edit::{at, insert, list, remove, set, yaml};

/// One edit: its name, the edit, its verdict, and a line some finding must
/// contain (none for a semantic-free edit).
type Row = (&'static str, fn(&mut Value), Verdict, &'static str);

const LIMIT: &str = "paths./pets.get.parameters.limit";
const NEW_PET: &str = "components.schemas.NewPet";
const PET: &str = "components.schemas.Pet";

/// The table, a row a line (or a few): rustfmt would spread each row over a screen.
#[rustfmt::skip]
fn catalogue() -> Vec<Row> {
    use Verdict::{Breaking as B, Compatible as C, SemanticFree as S};
    vec![
        // Breaking: removals and renames.
        ("removing the deprecated getPet before its sunset", |d| drop(remove(d, "paths./pets/{petId}")), B,
            "paths./pets/{petId}.get: deprecated operation removed before its sunset (Thu, 05 Dec 2030"),
        ("removing an operation", |d| drop(remove(d, "paths./pets.get")), B,
            "paths./pets.get: operation removed: breaking"),
        ("renaming an operationId", |d| set(d, "paths./pets.post.operationId", "addPet"), B,
            "paths./pets.post.operationId: createPet -> addPet"),
        ("removing a parameter", |d| drop(remove(d, "paths./pets.get.parameters.status")), B,
            "paths./pets.get.parameters.status: query parameter removed: breaking"),
        ("removing a property", |d| drop(remove(d, &format!("{PET}.properties.categoryId"))), B,
            "components.schemas.Pet.properties.categoryId: property removed"),
        ("removing a response status", |d| drop(remove(d, "paths./pets/{petId}.get.responses.404")), B,
            "paths./pets/{petId}.get.responses.404: response removed"),
        ("removing a response header", |d| drop(remove(d, "paths./pets/{petId}.get.responses.200.headers.Deprecation")), B,
            "paths./pets/{petId}.get.responses.200.headers.deprecation: response header removed"),
        ("removing the request body", |d| drop(remove(d, "paths./pets.post.requestBody")), B,
            "paths./pets.post.requestBody: request body removed"),
        // Breaking: new or stricter request inputs.
        ("a new required parameter", |d| list(d, "paths./pets.get.parameters").push(yaml(
            "{name: owner, in: query, required: true, schema: {type: string}}")), B,
            "paths./pets.get.parameters.owner: new required query parameter: breaking"),
        ("making an optional parameter required", |d| set(d, &format!("{LIMIT}.required"), true), B,
            "paths./pets.get.parameters.limit.required: now required: breaking"),
        ("a new required request property", |d| {
            insert(d, &format!("{NEW_PET}.properties.ownerId"), yaml("{type: integer}"));
            list(d, &format!("{NEW_PET}.required")).push("ownerId".into());
        }, B, "components.schemas.NewPet.properties.ownerId: new required property"),
        ("making an optional request property required", |d| list(d, &format!("{NEW_PET}.required")).push("status".into()), B,
            "components.schemas.NewPet.required.status: property now required (narrows what requests may send)"),
        ("lowering a request maximum", |d| set(d, &format!("{LIMIT}.schema.maximum"), 50), B,
            "paths./pets.get.parameters.limit.schema.maximum: 100 -> 50 (narrows what requests may send): breaking"),
        ("raising a request minimum", |d| set(d, &format!("{LIMIT}.schema.minimum"), 5), B,
            "paths./pets.get.parameters.limit.schema.minimum: 1 -> 5 (narrows what requests may send)"),
        ("shortening a request maxLength", |d| set(d, &format!("{NEW_PET}.properties.name.maxLength"), 100), B,
            "components.schemas.NewPet.properties.name.maxLength: 255 -> 100 (narrows"),
        ("narrowing a request format", |d| set(d, &format!("{NEW_PET}.properties.categoryId.format"), "int32"), B,
            "components.schemas.NewPet.properties.categoryId.format: \"int64\" -> \"int32\" (narrows"),
        ("changing a request type", |d| set(d, &format!("{NEW_PET}.properties.categoryId"), yaml("{type: string}")), B,
            "components.schemas.NewPet.properties.categoryId.type: \"integer\" -> \"string\""),
        ("changing a request pattern", |d| set(d, &format!("{NEW_PET}.properties.name.pattern"), "^[a-z]+$"), B,
            "components.schemas.NewPet.properties.name.pattern"),
        ("removing an enum value", |d| list(d, "components.schemas.PetStatus.enum").retain(|v| v != "sold"), B,
            "components.schemas.PetStatus.enum: values removed: \"sold\" (narrows what requests may send)"),
        ("a new required request body", |d| {
            let body = at(d, "paths./pets.post.requestBody").clone();
            insert(d, "paths./pets.get.requestBody", body);
        }, B, "paths./pets.get.requestBody: new required request body: breaking"),
        ("changing a default", |d| set(d, &format!("{LIMIT}.schema.default"), 10), B,
            "paths./pets.get.parameters.limit.schema.default: 20 -> 10 (changes what an omitted value means)"),
        // Breaking: wider responses.
        ("a new enum value in a response", |d| list(d, "components.schemas.PetStatus.enum").push("adopted".into()), B,
            "components.schemas.PetStatus.enum: values added: \"adopted\" (generated clients' enums reject \
             unknown values) (widens what responses may hold): breaking"),
        ("a response property no longer required", |d| list(d, &format!("{PET}.required")).retain(|v| v != "name"), B,
            "components.schemas.Pet.required.name: property no longer required (widens what responses may hold)"),
        ("a wider response format", |d| set(d, "components.schemas.Error.properties.status.format", "int64"), B,
            "components.schemas.Error.properties.status.format: \"int32\" -> \"int64\" (widens what responses may hold)"),
        ("a wider response type", |d| set(d, &format!("{PET}.properties.id.type"), "number"), B,
            "components.schemas.Pet.properties.id.type: \"integer\" -> \"number\" (widens what responses may hold)"),
        ("a new success status", |d| {
            let created = at(d, "paths./pets.post.responses.201").clone();
            insert(d, "paths./pets.post.responses.200", created);
        }, B, "paths./pets.post.responses.200: new success response"),
        ("removing security", |d| set(d, "paths./pets.get.security", yaml("[]")), B,
            "paths./pets.get.security: [[\"bearerAuth\"]] -> [] (a semantic change"),
        ("changing the security scheme", |d| set(d, "components.securitySchemes.bearerAuth", yaml(
            "{type: apiKey, in: header, name: X-Api-Key}")), B,
            "components.securitySchemes.bearerAuth: security scheme removed or changed"),
        // Compatible.
        ("a new optional parameter", |d| list(d, "paths./pets.get.parameters").push(yaml(
            "{name: after, in: query, schema: {type: integer, format: int64}}")), C,
            "paths./pets.get.parameters.after: new optional query parameter: compatible"),
        ("a new operation", |d| {
            let mut delete = at(d, "paths./pets/{petId}.get").clone();
            set(&mut delete, "operationId", "deletePet");
            insert(d, "paths./pets/{petId}.delete", delete);
        }, C, "paths./pets/{petId}.delete: new operation: compatible"),
        ("a new response header", |d| insert(d, "paths./pets.get.responses.200.headers", yaml(
            "{Link: {schema: {type: string}}}")), C,
            "paths./pets.get.responses.200.headers.link: new response header: compatible"),
        ("a new error status", |d| {
            let bad = at(d, "paths./pets.post.responses.400").clone();
            insert(d, "paths./pets.post.responses.409", bad);
        }, C, "paths./pets.post.responses.409: new error response"),
        ("widening request bounds", |d| {
            set(d, &format!("{LIMIT}.schema.maximum"), 500);
            set(d, &format!("{NEW_PET}.properties.name.maxLength"), 1000);
        }, C, "paths./pets.get.parameters.limit.schema.maximum: 100 -> 500 (widens what requests may send): compatible"),
        ("making the request body optional", |d| set(d, "paths./pets.post.requestBody.required", false), C,
            "paths./pets.post.requestBody.required: no longer required: compatible"),
        ("deprecating an operation", |d| insert(d, "paths./pets.post.deprecated", true), C,
            "paths./pets.post.deprecated: now deprecated: compatible"),
        ("a new optional request property", |d| insert(d, &format!("{NEW_PET}.properties.nickname"), yaml("{type: string}")), C,
            "components.schemas.NewPet.properties.nickname: new optional property: compatible"),
        ("a new response property of an open object", |d| insert(d, &format!("{PET}.properties.nickname"), yaml("{type: string}")), C,
            "components.schemas.Pet.properties.nickname: new property (older clients ignore"),
        ("a narrower response", |d| set(d, &format!("{PET}.properties.name.maxLength"), 100), C,
            "components.schemas.Pet.properties.name.maxLength: 255 -> 100 (narrows what responses may hold): compatible"),
        ("deprecating a parameter", |d| insert(d, "paths./pets.get.parameters.status.deprecated", true), C,
            "paths./pets.get.parameters.status.deprecated: false -> true: compatible"),
        // Semantic-free.
        ("descriptions, summaries and examples", |d| {
            set(d, "paths./pets.get.summary", "Browse the animals");
            set(d, "paths./pets.get.description", "Other words.");
            set(d, &format!("{PET}.description"), "Reworded.");
            set(d, "info.title", "The Pet Store");
        }, S, ""),
        ("an inlined reference", |d| {
            let status = at(d, "components.schemas.PetStatus").clone();
            set(d, "paths./pets.get.parameters.status.schema", status);
        }, S, ""),
        ("reordered required lists and enums", |d| {
            list(d, &format!("{PET}.required")).reverse();
            list(d, "components.schemas.PetStatus.enum").reverse();
        }, S, ""),
    ]
}

/// The released 1.0.0 document, parsed.
fn released() -> Value {
    let text = std::fs::read_to_string(released_dir().join("petstore-1.0.0.yaml")).unwrap();
    yaml(&text)
}

fn api(doc: &Value) -> openapiv3::OpenAPI {
    serde_norway::from_value(doc.clone()).expect("the edited document is OpenAPI")
}

/// The gate's verdict from `old` to `new`, with a finding line containing
/// `expected` (a semantic-free change has none); the reason when it is not
/// what the row says.
fn judge(old: &Value, new: &Value, verdict: Verdict, expected: &str) -> Option<String> {
    let (findings, ours) = compare(&api(old), &api(new));
    let lines: Vec<String> = findings.iter().map(ToString::to_string).collect();
    // Shown with --nocapture: what the gate says about the edit.
    println!("  {ours}\n  {}", lines.join("\n  "));
    let line_found = match verdict {
        Verdict::SemanticFree => lines.is_empty(),
        _ => lines.iter().any(|line| line.contains(expected)),
    };
    let right = ours == verdict && line_found;
    (!right).then(|| format!("{ours}, expected {verdict} with {expected:?}"))
}

#[test]
fn each_edit_gets_its_verdict() {
    let mut wrong = Vec::new();
    for (name, edit, verdict, expected) in catalogue() {
        let old = released();
        let mut new = old.clone();
        edit(&mut new);
        assert_ne!(old, new, "{name}: the edit changed nothing");
        println!("{name}:");
        if let Some(why) = judge(&old, &new, verdict, expected) {
            wrong.push(format!("{name}: {why}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_response_header_now_always_sent_is_compatible() {
    let headers = "paths./pets.get.responses.200.headers";
    let mut optional = released();
    insert(
        &mut optional,
        headers,
        yaml("{X-Total: {required: false, schema: {type: string}}}"),
    );
    let mut required = optional.clone();
    set(&mut required, &format!("{headers}.X-Total.required"), true);
    let compatible = |old: &Value, new: &Value, line| judge(old, new, Verdict::Compatible, line);
    assert_eq!(
        compatible(&released(), &optional, "new response header"),
        None
    );
    let line = "x-total.required: now always sent";
    assert_eq!(compatible(&optional, &required, line), None);
}

// The semver rule, on files.

/// The gate's failures for 1.0.0 changed by `edit` and versioned `version`,
/// against 1.0.0 as the only release (the rules are about one release;
/// later ones are covered by the committed contract's own test).
fn gate_with(version: &str, edit: impl FnOnce(&mut Value)) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let releases = dir.path().join("released");
    std::fs::create_dir(&releases).unwrap();
    let name = "petstore-1.0.0.yaml";
    std::fs::copy(released_dir().join(name), releases.join(name)).unwrap();
    let mut doc = released();
    edit(&mut doc);
    set(&mut doc, "info.version", version);
    let contract = dir.path().join("petstore.yaml");
    std::fs::write(&contract, serde_norway::to_string(&doc).unwrap()).unwrap();
    gate(&contract, &releases).unwrap().failures
}

fn add_optional_parameter(doc: &mut Value) {
    list(doc, "paths./pets.get.parameters")
        .push(yaml("{name: after, in: query, schema: {type: integer}}"));
}

fn lower_maximum(doc: &mut Value) {
    set(doc, &format!("{LIMIT}.schema.maximum"), 50);
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
    let reword = |doc: &mut Value| set(doc, "info.title", "Pets");
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
    // 1.0.0's document as the next minor version: compatible with 1.0.0,
    // but it removes the `after` parameter and the `Link` header that 1.1.0
    // released (and every later release kept): breaking against each of
    // those, not against 1.0.0.
    let dir = tempfile::tempdir().unwrap();
    let mut doc = released();
    let later: Vec<semver::Version> = super::released(&released_dir())
        .unwrap()
        .into_iter()
        .map(|release| release.version)
        .filter(|version| *version > semver::Version::new(1, 0, 0))
        .collect();
    let newest = later.last().unwrap();
    let next = semver::Version::new(newest.major, newest.minor + 1, 0);
    set(&mut doc, "info.version", next.to_string());
    let contract = dir.path().join("petstore.yaml");
    std::fs::write(&contract, serde_norway::to_string(&doc).unwrap()).unwrap();
    let failures = gate(&contract, &released_dir()).unwrap().failures;
    assert_eq!(failures.len(), later.len(), "{failures:?}");
    for (failure, release) in failures.iter().zip(&later) {
        assert!(
            failure.contains(&format!("against released {release}")) && failure.contains("major"),
            "{failures:?}"
        );
    }
}
