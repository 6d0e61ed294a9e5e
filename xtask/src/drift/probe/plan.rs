//! What the probes need to know about each operation, read from the YAML.

use openapiv3::{APIKeyLocation, OpenAPI, Operation, ReferenceOr, SecurityScheme};
use serde_json::Value;

use crate::drift::canon::{self, Side, covers, is_error};

/// An operation of the YAML, as the probes see it.
pub struct ProbeOp {
    /// `paths./pets.get`.
    pub location: String,
    /// `getPet`, or the location when there is no operationId.
    pub name: String,
    /// The path template, without the servers' prefix.
    pub path: String,
    /// The HTTP method.
    pub method: reqwest::Method,
    /// Its parameters.
    pub params: Vec<Param>,
    /// Its JSON-like request body, if it has one.
    pub body: Option<Body>,
    /// The lowest 2xx status it declares, with the canonical response.
    pub success: Option<(u16, Value)>,
    /// The 4xx/5xx statuses it declares (`404`, `4XX`) with their
    /// canonical responses.
    pub errors: Vec<(String, Value)>,
    /// Whether the YAML requires credentials for it.
    pub secured: bool,
    /// How credentials are sent.
    pub scheme: Scheme,
}

impl ProbeOp {
    /// The declared response covering the error status `status`: its own
    /// code first, then its range.
    pub fn declared_error(&self, status: u16) -> Option<&Value> {
        let exact = self
            .errors
            .iter()
            .find(|(key, _)| *key == status.to_string());
        exact
            .or_else(|| self.errors.iter().find(|(key, _)| covers(key, status)))
            .map(|(_, response)| response)
    }

    /// The schema of the success response's JSON body, if any.
    pub fn success_schema(&self) -> Option<&Value> {
        let (_, response) = self.success.as_ref()?;
        json_schema(response)
    }
}

/// A parameter of an operation.
pub struct Param {
    /// Its name.
    pub name: String,
    /// `query`, `path`, `header` or `cookie`.
    pub location: &'static str,
    /// Whether the YAML requires it.
    pub required: bool,
    /// Its canonical schema, default included.
    pub schema: Value,
}

/// A request body.
pub struct Body {
    /// Whether the YAML requires it.
    pub required: bool,
    /// The media type to send (`application/json`).
    pub media_type: String,
    /// Its canonical schema.
    pub schema: Value,
}

/// How the YAML says credentials are sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// An API key in this header.
    Header(String),
    /// An API key in this query parameter.
    Query(String),
    /// A scheme the probes cannot speak (described).
    Unsupported(String),
}

/// Every operation of the YAML.
pub fn operations(side: &Side<'_>) -> Vec<ProbeOp> {
    side.operations()
        .into_values()
        .map(|op| {
            let location = op.location();
            let operation = op.operation;
            let responses = side.responses(operation);
            let success = responses
                .iter()
                .filter_map(|(key, r)| Some((key.parse::<u16>().ok()?, r)))
                .filter(|(code, _)| (200..300).contains(code))
                .min_by_key(|(code, _)| *code)
                .map(|(code, r)| (code, side.response_json(r)));
            let errors = responses
                .iter()
                .filter(|(key, _)| is_error(key))
                .map(|(key, r)| (key.clone(), side.response_json(r)))
                .collect();
            let (secured, scheme) = security(side.api, operation);
            ProbeOp {
                name: operation
                    .operation_id
                    .clone()
                    .unwrap_or_else(|| location.clone()),
                location,
                path: op.path.clone(),
                method: reqwest::Method::from_bytes(op.method.to_uppercase().as_bytes())
                    .expect("an OpenAPI method is an HTTP method"),
                params: op
                    .parameters
                    .iter()
                    .map(|p| {
                        let data = p.parameter_data_ref();
                        let (key, format) = side.format_json(&data.format);
                        let schema = if key == "schema" {
                            format
                        } else {
                            first_schema(&format).cloned().unwrap_or(Value::Null)
                        };
                        Param {
                            name: data.name.clone(),
                            location: canon::location(p),
                            required: data.required,
                            schema,
                        }
                    })
                    .collect(),
                body: body(side, operation),
                success,
                errors,
                secured,
                scheme,
            }
        })
        .collect()
}

fn body(side: &Side<'_>, operation: &Operation) -> Option<Body> {
    let body = side.body(operation.request_body.as_ref()?)?;
    // JSON is what the probes can write; another media type is sent as is.
    let (media_type, media) = body
        .content
        .iter()
        .find(|(media_type, _)| media_type.contains("json"))
        .or_else(|| body.content.first())?;
    Some(Body {
        required: body.required,
        media_type: media_type.clone(),
        schema: media
            .schema
            .as_ref()
            .map_or(Value::Null, |s| side.schema(s)),
    })
}

/// Whether the operation is secured (its own `security`, else the global
/// one; an empty list or an empty requirement means no credentials are
/// needed), and how credentials are sent.
fn security(api: &OpenAPI, operation: &Operation) -> (bool, Scheme) {
    let requirements = operation.security.as_ref().or(api.security.as_ref());
    let secured = requirements.is_some_and(|r| !r.is_empty() && r.iter().all(|r| !r.is_empty()));
    // The scheme to speak: the operation's, else the global one, else the
    // first one defined (an open operation may still be sent a key).
    let name = requirements
        .into_iter()
        .chain(api.security.as_ref())
        .flatten()
        .flat_map(|requirement| requirement.keys())
        .next();
    let schemes = api.components.as_ref().map(|c| &c.security_schemes);
    let scheme = match name {
        Some(name) => schemes.and_then(|s| s.get(name)),
        None => schemes.and_then(|s| s.values().next()),
    };
    let scheme = match scheme {
        None => Scheme::Bearer,
        Some(ReferenceOr::Reference { reference }) => Scheme::Unsupported(reference.clone()),
        Some(ReferenceOr::Item(scheme)) => match scheme {
            SecurityScheme::HTTP { scheme, .. } if scheme.eq_ignore_ascii_case("bearer") => {
                Scheme::Bearer
            }
            SecurityScheme::APIKey {
                location: APIKeyLocation::Header,
                name,
                ..
            } => Scheme::Header(name.clone()),
            SecurityScheme::APIKey {
                location: APIKeyLocation::Query,
                name,
                ..
            } => Scheme::Query(name.clone()),
            other => Scheme::Unsupported(format!("{other:?}")),
        },
    };
    (secured, scheme)
}

/// The schema of a canonical response's (or content map's) JSON body.
pub fn json_schema(response: &Value) -> Option<&Value> {
    first_schema(response.get("content")?)
}

fn first_schema(content: &Value) -> Option<&Value> {
    let content = content.as_object()?;
    let media = content
        .iter()
        .find(|(media_type, _)| media_type.contains("json"))
        .or_else(|| content.iter().next())?
        .1;
    media.get("schema").filter(|s| !s.is_null())
}
