//! The catalogue of edits that proves the gate: each edit of the released
//! 1.0.0 document has the verdict it must get and a line it must print —
//! and, measured beside it, the verdict Oxide's `drift` crate gives the same
//! edit (the table in `docs/compatibility.md`). Then the semver rule, on
//! whole files.

use serde_norway::Value;

use super::{Verdict, compare, gate, released_dir};
use crate::yaml_edit::{at, insert, list, remove, set, yaml};

/// One edit: its name, the edit, our verdict, drift's verdict (`None`: drift
/// reports the change as unhandled), and a line some finding of ours must
/// contain (none for a semantic-free edit).
type Row = (
    &'static str,
    fn(&mut Value),
    Verdict,
    Option<Verdict>,
    &'static str,
);

const LIMIT: &str = "paths./pets.get.parameters.limit";
const NEW_PET: &str = "components.schemas.NewPet";
const PET: &str = "components.schemas.Pet";

/// The table, a row a line (or a few): rustfmt would spread each row over a screen.
#[rustfmt::skip]
fn catalogue() -> Vec<Row> {
    use Verdict::{Breaking as B, Compatible as C, SemanticFree as S};
    vec![
        // Breaking: removals and renames.
        ("removing the deprecated getPet before its sunset", |d| drop(remove(d, "paths./pets/{petId}")), B, Some(B),
            "paths./pets/{petId}.get: deprecated operation removed before its sunset (Thu, 05 Dec 2030"),
        ("removing an operation", |d| drop(remove(d, "paths./pets.get")), B, Some(B),
            "paths./pets.get: operation removed: breaking"),
        ("renaming an operationId", |d| set(d, "paths./pets.post.operationId", "addPet"), B, Some(S),
            "paths./pets.post.operationId: createPet -> addPet"),
        ("removing a parameter", |d| drop(remove(d, "paths./pets.get.parameters.status")), B, Some(B),
            "paths./pets.get: drift: The parameter 'status' was removed: breaking"),
        ("removing a property", |d| drop(remove(d, &format!("{PET}.properties.categoryId"))), B, None,
            "components.schemas.Pet.properties.categoryId: property removed"),
        ("removing a response status", |d| drop(remove(d, "paths./pets/{petId}.get.responses.404")), B, Some(C),
            "paths./pets/{petId}.get.responses.404: response removed"),
        ("removing a response header", |d| drop(remove(d, "paths./pets/{petId}.get.responses.200.headers.Deprecation")), B, Some(S),
            "paths./pets/{petId}.get.responses.200.headers.deprecation: response header removed"),
        ("removing the request body", |d| drop(remove(d, "paths./pets.post.requestBody")), B, Some(C),
            "paths./pets.post.requestBody: request body removed"),
        // Breaking: new or stricter request inputs.
        ("a new required parameter", |d| list(d, "paths./pets.get.parameters").push(yaml(
            "{name: owner, in: query, required: true, schema: {type: string}}")), B, Some(B),
            "paths./pets.get: drift: A new, required parameter 'owner' was added: breaking"),
        ("making an optional parameter required", |d| set(d, &format!("{LIMIT}.required"), true), B, Some(B),
            "paths./pets.get: drift: The parameter 'limit' was optional and is now required: breaking"),
        ("a new required request property", |d| {
            insert(d, &format!("{NEW_PET}.properties.ownerId"), yaml("{type: integer}"));
            list(d, &format!("{NEW_PET}.required")).push("ownerId".into());
        }, B, None, "components.schemas.NewPet.properties.ownerId: new required property"),
        ("making an optional request property required", |d| list(d, &format!("{NEW_PET}.required")).push("status".into()), B, None,
            "components.schemas.NewPet.required.status: property now required (narrows what requests may send)"),
        ("lowering a request maximum", |d| set(d, &format!("{LIMIT}.schema.maximum"), 50), B, None,
            "paths./pets.get.parameters.limit.schema.maximum: 100 -> 50 (narrows what requests may send): breaking"),
        ("raising a request minimum", |d| set(d, &format!("{LIMIT}.schema.minimum"), 5), B, None,
            "paths./pets.get.parameters.limit.schema.minimum: 1 -> 5 (narrows what requests may send)"),
        ("shortening a request maxLength", |d| set(d, &format!("{NEW_PET}.properties.name.maxLength"), 100), B, None,
            "components.schemas.NewPet.properties.name.maxLength: 255 -> 100 (narrows"),
        ("narrowing a request format", |d| set(d, &format!("{NEW_PET}.properties.categoryId.format"), "int32"), B, None,
            "components.schemas.NewPet.properties.categoryId.format: \"int64\" -> \"int32\" (narrows"),
        ("changing a request type", |d| set(d, &format!("{NEW_PET}.properties.categoryId"), yaml("{type: string}")), B, Some(B),
            "components.schemas.NewPet.properties.categoryId.type: \"integer\" -> \"string\""),
        ("changing a request pattern", |d| set(d, &format!("{NEW_PET}.properties.name.pattern"), "^[a-z]+$"), B, None,
            "components.schemas.NewPet.properties.name.pattern"),
        ("removing an enum value", |d| list(d, "components.schemas.PetStatus.enum").retain(|v| v != "sold"), B, None,
            "components.schemas.PetStatus.enum: values removed: \"sold\" (narrows what requests may send)"),
        ("changing a default", |d| set(d, &format!("{LIMIT}.schema.default"), 10), B, Some(S),
            "paths./pets.get.parameters.limit.schema.default: 20 -> 10 (changes what an omitted value means)"),
        // Breaking: wider responses.
        ("a new enum value in a response", |d| list(d, "components.schemas.PetStatus.enum").push("adopted".into()), B, None,
            "components.schemas.PetStatus.enum: values added: \"adopted\" (generated clients' enums reject \
             unknown values) (widens what responses may hold): breaking"),
        ("a response property no longer required", |d| list(d, &format!("{PET}.required")).retain(|v| v != "name"), B, None,
            "components.schemas.Pet.required.name: property no longer required (widens what responses may hold)"),
        ("a wider response format", |d| set(d, "components.schemas.Error.properties.status.format", "int64"), B, None,
            "components.schemas.Error.properties.status.format: \"int32\" -> \"int64\" (widens what responses may hold)"),
        ("a wider response type", |d| set(d, &format!("{PET}.properties.id.type"), "number"), B, Some(B),
            "components.schemas.Pet.properties.id.type: \"integer\" -> \"number\" (widens what responses may hold)"),
        ("a new success status", |d| {
            let created = at(d, "paths./pets.post.responses.201").clone();
            insert(d, "paths./pets.post.responses.200", created);
        }, B, Some(B), "paths./pets.post.responses.200: new success response"),
        ("removing security", |d| set(d, "paths./pets.get.security", yaml("[]")), B, Some(S),
            "paths./pets.get.security: [[\"bearerAuth\"]] -> [] (a semantic change"),
        ("changing the security scheme", |d| set(d, "components.securitySchemes.bearerAuth", yaml(
            "{type: apiKey, in: header, name: X-Api-Key}")), B, Some(S),
            "components.securitySchemes.bearerAuth: security scheme removed or changed"),
        // Compatible.
        ("a new optional parameter", |d| list(d, "paths./pets.get.parameters").push(yaml(
            "{name: after, in: query, schema: {type: integer, format: int64}}")), C, Some(C),
            "paths./pets.get: drift: A new, optional parameter 'after' was added: compatible"),
        ("a new operation", |d| {
            let mut delete = at(d, "paths./pets/{petId}.get").clone();
            set(&mut delete, "operationId", "deletePet");
            insert(d, "paths./pets/{petId}.delete", delete);
        }, C, Some(C), "paths./pets/{petId}.delete: drift: The operation deletePet was added: compatible"),
        ("a new response header", |d| insert(d, "paths./pets.get.responses.200.headers", yaml(
            "{Link: {schema: {type: string}}}")), C, Some(S),
            "paths./pets.get.responses.200.headers.link: new response header: compatible"),
        ("a new error status", |d| {
            let bad = at(d, "paths./pets.post.responses.400").clone();
            insert(d, "paths./pets.post.responses.409", bad);
        }, C, Some(B), "paths./pets.post.responses.409: new error response"),
        ("widening request bounds", |d| {
            set(d, &format!("{LIMIT}.schema.maximum"), 500);
            set(d, &format!("{NEW_PET}.properties.name.maxLength"), 1000);
        }, C, None, "paths./pets.get.parameters.limit.schema.maximum: 100 -> 500 (widens what requests may send): compatible"),
        ("deprecating an operation", |d| insert(d, "paths./pets.post.deprecated", true), C, Some(S),
            "paths./pets.post.deprecated: now deprecated: compatible"),
        ("a new optional request property", |d| insert(d, &format!("{NEW_PET}.properties.nickname"), yaml("{type: string}")), C, None,
            "components.schemas.NewPet.properties.nickname: new optional property: compatible"),
        ("a new response property of an open object", |d| insert(d, &format!("{PET}.properties.nickname"), yaml("{type: string}")), C, None,
            "components.schemas.Pet.properties.nickname: new property (older clients ignore"),
        ("a narrower response", |d| set(d, &format!("{PET}.properties.name.maxLength"), 100), C, None,
            "components.schemas.Pet.properties.name.maxLength: 255 -> 100 (narrows what responses may hold): compatible"),
        ("deprecating a parameter", |d| insert(d, "paths./pets.get.parameters.status.deprecated", true), C, Some(S),
            "paths./pets.get.parameters.status.deprecated: false -> true: compatible"),
        // Semantic-free.
        ("descriptions, summaries and examples", |d| {
            set(d, "paths./pets.get.summary", "Browse the animals");
            set(d, "paths./pets.get.description", "Other words.");
            set(d, &format!("{PET}.description"), "Reworded.");
            set(d, "info.title", "The Pet Store");
        }, S, Some(S), ""),
        ("an inlined reference", |d| {
            let status = at(d, "components.schemas.PetStatus").clone();
            set(d, "paths./pets.get.parameters.status.schema", status);
        }, S, Some(S), ""),
        ("reordered required lists and enums", |d| {
            list(d, &format!("{PET}.required")).reverse();
            list(d, "components.schemas.PetStatus.enum").reverse();
        }, S, None, ""),
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

/// drift's verdict on the change from `old` to `new`, in our terms:
/// backward-incompatible or incompatible is breaking, forward-incompatible
/// (a newer client against an older server, which the gate does not
/// protect) compatible, trivial or nothing semantic-free; `None` when it
/// reports an unhandled change and no breaking one.
fn drift_verdict(old: &Value, new: &Value) -> Option<Verdict> {
    use openapi_drift::ChangeClass::*;
    let json = |doc: &Value| serde_json::to_value(doc).expect("YAML as JSON");
    let changes = openapi_drift::compare(&json(old), &json(new)).expect("drift compares them");
    let classes: Vec<_> = changes
        .iter()
        .flat_map(|c| &c.changes)
        .map(|c| c.class)
        .collect();
    let judged = classes.iter().map(|class| match class {
        BackwardIncompatible | Incompatible => Some(Verdict::Breaking),
        ForwardIncompatible => Some(Verdict::Compatible),
        Trivial => Some(Verdict::SemanticFree),
        Unhandled => None,
    });
    let worst = judged
        .clone()
        .flatten()
        .max()
        .unwrap_or(Verdict::SemanticFree);
    (worst == Verdict::Breaking || judged.clone().all(|v| v.is_some())).then_some(worst)
}

/// Our verdict with a finding line containing `expected` (a semantic-free
/// change has none), and drift's verdict, from `old` to `new`; the reason
/// when either is not what the row says.
fn judge(old: &Value, new: &Value, row: (Verdict, Option<Verdict>, &str)) -> Option<String> {
    let (verdict, drift, expected) = row;
    let (findings, ours) = compare(&api(old), &api(new)).expect("the documents compare");
    let lines: Vec<String> = findings.iter().map(ToString::to_string).collect();
    let theirs = drift_verdict(old, new);
    // Shown with --nocapture: what the gate and drift say about the edit.
    println!("  ours {ours}, drift {theirs:?}\n  {}", lines.join("\n  "));
    let line_found = match verdict {
        Verdict::SemanticFree => lines.is_empty(),
        _ => lines.iter().any(|line| line.contains(expected)),
    };
    let right = ours == verdict && line_found && theirs == drift;
    let why = format!(
        "ours {ours}, drift {theirs:?}, expected {verdict} with {expected:?} and drift {drift:?}"
    );
    (!right).then_some(why)
}

#[test]
fn each_edit_gets_its_verdict_and_drift_its_measured_one() {
    let mut wrong = Vec::new();
    for (name, edit, verdict, drift, expected) in catalogue() {
        let old = released();
        let mut new = old.clone();
        edit(&mut new);
        assert_ne!(old, new, "{name}: the edit changed nothing");
        println!("{name}:");
        if let Some(why) = judge(&old, &new, (verdict, drift, expected)) {
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
    let row = |line| (Verdict::Compatible, Some(Verdict::SemanticFree), line);
    assert_eq!(
        judge(&released(), &optional, row("new response header")),
        None
    );
    let line = "x-total.required: now always sent";
    assert_eq!(judge(&optional, &required, row(line)), None);
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
