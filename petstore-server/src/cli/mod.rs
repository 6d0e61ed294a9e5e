//! The `petstore-server` command line (the binary's, not the library's).

pub mod keys;
pub mod settings;
