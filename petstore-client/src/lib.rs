//! Typed client for the pet store service (generated from `openapi/petstore.yaml`; see its issue).
