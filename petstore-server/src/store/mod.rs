//! The storage interface and its implementations.
//!
//! The HTTP layer sees only [`PetStore`]; which database sits behind it is
//! chosen once, at start-up, from the database URL.

use std::path::PathBuf;
use std::sync::Arc;

use crate::model::{NewPet, Pet, PetStatus};

mod sqlite;

pub use sqlite::SqliteStore;

/// A failure of the database, never of the request: the HTTP layer answers
/// it with 503 and the client may retry.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

/// A catalogue of pets.
#[async_trait::async_trait]
pub trait PetStore: Send + Sync + 'static {
    /// Stores `pet` under a new identifier. Returns only once the pet is
    /// durable: an `Ok` is a promise that it survives a crash.
    async fn create(&self, pet: NewPet) -> Result<Pet, StoreError>;

    /// At most `limit` pets in ascending `id` order, only those with `status`
    /// when it is given.
    async fn list(&self, limit: u32, status: Option<PetStatus>) -> Result<Vec<Pet>, StoreError>;

    /// The pet with identifier `id`, if there is one.
    async fn get(&self, id: i64) -> Result<Option<Pet>, StoreError>;

    /// Finishes pending writes and closes the database. Later calls fail.
    async fn close(&self);
}

/// Where the catalogue lives, parsed from `--database` / `PETSTORE_DATABASE_URL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// An SQLite file: `sqlite://relative/path.db` or `sqlite:///absolute/path.db`.
    Sqlite(PathBuf),
}

impl std::fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
        }
    }
}

impl std::str::FromStr for DatabaseUrl {
    type Err = String;

    fn from_str(url: &str) -> Result<DatabaseUrl, String> {
        if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(format!(
                    "{url:?} names no file; expected sqlite://path/to/file.db"
                ));
            }
            return Ok(DatabaseUrl::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Err("PostgreSQL is not supported by this build yet; use sqlite://FILE".into());
        }
        Err(format!(
            "unsupported database URL {url:?}; expected sqlite://path/to/file.db"
        ))
    }
}

/// Opens the database at `url`, creating or migrating its schema.
pub async fn open(url: &DatabaseUrl) -> Result<Arc<dyn PetStore>, StoreError> {
    match url {
        DatabaseUrl::Sqlite(path) => Ok(Arc::new(SqliteStore::open(path.clone()).await?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_relative_and_absolute_files() {
        assert_eq!(
            "sqlite://petstore.db".parse(),
            Ok(DatabaseUrl::Sqlite("petstore.db".into()))
        );
        assert_eq!(
            "sqlite:///var/x.db".parse(),
            Ok(DatabaseUrl::Sqlite("/var/x.db".into()))
        );
        assert_eq!(
            "sqlite:a.db".parse(),
            Ok(DatabaseUrl::Sqlite("a.db".into()))
        );
    }

    #[test]
    fn other_urls_are_refused_with_a_reason() {
        assert!(
            "sqlite://"
                .parse::<DatabaseUrl>()
                .unwrap_err()
                .contains("names no file")
        );
        assert!(
            "mysql://x"
                .parse::<DatabaseUrl>()
                .unwrap_err()
                .contains("unsupported")
        );
        assert!(
            "postgres://x"
                .parse::<DatabaseUrl>()
                .unwrap_err()
                .contains("PostgreSQL")
        );
    }
}
