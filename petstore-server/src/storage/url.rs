//! Database URLs: which database a server uses, parsed from
//! `sqlite://FILE` or `postgres://…`, with passwords masked wherever a URL
//! is shown.

use std::path::PathBuf;

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
    pub fn parse(url: &str) -> Result<PostgresUrl, DatabaseUrlError> {
        url.parse::<tokio_postgres::Config>().map_err(|source| {
            DatabaseUrlError::InvalidPostgres {
                url: redact_password(url),
                source,
            }
        })?;
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

/// `scheme://user:secret@host/...?password=secret` →
/// `scheme://user:***@host/...?password=***`.
fn redact_password(url: &str) -> String {
    let (url, query) = match url.split_once('?') {
        Some((url, query)) => (url, Some(query)),
        None => (url, None),
    };
    let mut redacted = redact_userinfo(url);
    if let Some(query) = query {
        let parameters: Vec<String> = query
            .split('&')
            .map(|parameter| match parameter.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
                _ => parameter.to_owned(),
            })
            .collect();
        redacted.push('?');
        redacted.push_str(&parameters.join("&"));
    }
    redacted
}

fn redact_userinfo(url: &str) -> String {
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

/// Why a database URL is not usable. Passwords are masked.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseUrlError {
    /// `sqlite:` with no file after it.
    #[error("{url:?} names no file; expected sqlite://path/to/file.db")]
    NoSqliteFile {
        /// The URL given.
        url: String,
    },
    /// A PostgreSQL URL the driver cannot parse.
    #[error("invalid PostgreSQL URL {url:?}: {source}")]
    InvalidPostgres {
        /// The URL given, password masked.
        url: String,
        /// The driver's reason.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Neither SQLite nor PostgreSQL.
    #[error(
        "unsupported database URL {url:?}; expected sqlite://path/to/file.db or \
         postgres://user:password@host:port/database"
    )]
    Unsupported {
        /// The URL given, password masked.
        url: String,
    },
}

impl std::str::FromStr for DatabaseUrl {
    type Err = DatabaseUrlError;

    fn from_str(url: &str) -> Result<DatabaseUrl, DatabaseUrlError> {
        if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(DatabaseUrlError::NoSqliteFile {
                    url: url.to_owned(),
                });
            }
            return Ok(DatabaseUrl::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return PostgresUrl::parse(url).map(DatabaseUrl::Postgres);
        }
        Err(DatabaseUrlError::Unsupported {
            url: redact_password(url),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_urls_name_relative_and_absolute_files() {
        let parse = |url: &str| url.parse::<DatabaseUrl>().unwrap();
        assert_eq!(
            parse("sqlite://petstore.db"),
            DatabaseUrl::Sqlite("petstore.db".into())
        );
        assert_eq!(
            parse("sqlite:///var/x.db"),
            DatabaseUrl::Sqlite("/var/x.db".into())
        );
        assert_eq!(parse("sqlite:a.db"), DatabaseUrl::Sqlite("a.db".into()));
    }

    #[test]
    fn other_urls_are_refused_with_a_reason() {
        let error = "sqlite://".parse::<DatabaseUrl>().unwrap_err().to_string();
        assert!(error.contains("names no file"), "{error}");
        let error = "mysql://u:hunter2@x/db"
            .parse::<DatabaseUrl>()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("unsupported") && !error.contains("hunter2"),
            "{error}"
        );
        let error = "postgres://u:hunter2@h:notaport/db"
            .parse::<DatabaseUrl>()
            .unwrap_err()
            .to_string();
        assert!(error.contains("invalid PostgreSQL URL"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }

    #[test]
    fn postgres_urls_keep_the_password_out_of_display() {
        let url: DatabaseUrl = "postgres://pets:hunter2@db.internal:5432/pets"
            .parse()
            .unwrap();
        assert_eq!(url.to_string(), "postgres://pets:***@db.internal:5432/pets");
        let query: DatabaseUrl = "postgres://pets@db/pets?sslmode=disable&password=hunter2"
            .parse()
            .unwrap();
        assert_eq!(
            query.to_string(),
            "postgres://pets@db/pets?sslmode=disable&password=***"
        );
        assert!(!format!("{url:?}").contains("hunter2"));
        let DatabaseUrl::Postgres(pg) = url else {
            panic!("not postgres")
        };
        assert_eq!(pg.url(), "postgres://pets:hunter2@db.internal:5432/pets");
        assert_eq!(pg.pool_size(), PostgresUrl::DEFAULT_POOL_SIZE);
        assert_eq!(pg.with_pool_size(0).pool_size(), 1);
    }
}
