//! The storage interface and its implementations.
//!
//! The HTTP layer sees only [`PetStore`]; which database sits behind it is
//! chosen once, at start-up, from the database URL.

use std::path::PathBuf;
use std::sync::Arc;

use crate::model::{NewPet, Pet, PetStatus};

mod catalogue;
mod postgres;
mod sqlite;

pub use postgres::PostgresStore;
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
    /// A PostgreSQL database: `postgres://user:password@host:port/database`.
    Postgres(PostgresUrl),
}

impl std::fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            DatabaseUrl::Postgres(url) => url.fmt(f),
        }
    }
}

/// A PostgreSQL connection URL and the size of the connection pool for it.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    url: String,
    pool_size: usize,
}

impl PostgresUrl {
    /// Connections per server process unless configured otherwise.
    pub const DEFAULT_POOL_SIZE: usize = 16;

    /// Parses a `postgres://` or `postgresql://` URL.
    pub fn parse(url: &str) -> Result<PostgresUrl, String> {
        let redacted = redact_password(url);
        url.parse::<tokio_postgres::Config>()
            .map_err(|e| format!("invalid PostgreSQL URL {redacted:?}: {e}"))?;
        Ok(PostgresUrl {
            url: url.to_owned(),
            pool_size: PostgresUrl::DEFAULT_POOL_SIZE,
        })
    }

    /// The same database with `pool_size` connections (at least one).
    pub fn with_pool_size(self, pool_size: usize) -> PostgresUrl {
        PostgresUrl {
            pool_size: pool_size.max(1),
            ..self
        }
    }

    /// The URL as given, password included.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The most connections one server process opens.
    pub fn pool_size(&self) -> usize {
        self.pool_size
    }
}

/// Shown in logs and errors: the password is masked.
impl std::fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_password(&self.url))
    }
}

impl std::fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PostgresUrl({self}, pool_size: {})", self.pool_size)
    }
}

/// `scheme://user:secret@host/...` → `scheme://user:***@host/...`.
fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
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
            return PostgresUrl::parse(url).map(DatabaseUrl::Postgres);
        }
        Err(format!(
            "unsupported database URL {:?}; expected sqlite://path/to/file.db or \
             postgres://user:password@host:port/database",
            redact_password(url)
        ))
    }
}

/// Opens the database at `url`, creating or migrating its schema.
pub async fn open(url: &DatabaseUrl) -> Result<Arc<dyn PetStore>, StoreError> {
    match url {
        DatabaseUrl::Sqlite(path) => Ok(Arc::new(SqliteStore::open(path.clone()).await?)),
        DatabaseUrl::Postgres(url) => Ok(Arc::new(PostgresStore::open(url).await?)),
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
        let error = "sqlite://".parse::<DatabaseUrl>().unwrap_err();
        assert!(error.contains("names no file"), "{error}");
        let error = "mysql://u:hunter2@x/db".parse::<DatabaseUrl>().unwrap_err();
        assert!(
            error.contains("unsupported") && !error.contains("hunter2"),
            "{error}"
        );
        let error = "postgres://u:hunter2@h:notaport/db"
            .parse::<DatabaseUrl>()
            .unwrap_err();
        assert!(error.contains("invalid PostgreSQL URL"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }

    #[test]
    fn postgres_urls_keep_the_password_out_of_display() {
        let url: DatabaseUrl = "postgres://pets:hunter2@db.internal:5432/pets"
            .parse()
            .unwrap();
        assert_eq!(url.to_string(), "postgres://pets:***@db.internal:5432/pets");
        assert!(!format!("{url:?}").contains("hunter2"));
        let DatabaseUrl::Postgres(pg) = url else {
            panic!("not postgres")
        };
        assert_eq!(pg.url(), "postgres://pets:hunter2@db.internal:5432/pets");
        assert_eq!(pg.pool_size(), PostgresUrl::DEFAULT_POOL_SIZE);
        assert_eq!(pg.with_pool_size(0).pool_size(), 1);
    }
}
