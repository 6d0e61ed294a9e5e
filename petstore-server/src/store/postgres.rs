//! PostgreSQL, for running many server instances on one catalogue.
//!
//! - Identifiers come from an identity column, so instances never collide.
//! - Every statement runs in autocommit mode on a pooled connection; with
//!   PostgreSQL's default `synchronous_commit = on`, the `INSERT` has been
//!   flushed to the WAL when it returns, so a `201` is durable.
//! - A lost connection fails only the requests that were using it (503); the
//!   pool checks connections when it hands them out and replaces broken ones,
//!   so the server recovers by itself when the database is back.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::{NoTls, Row};

use super::{PetStore, PostgresUrl, StoreError};
use crate::model::{NewPet, Pet, PetStatus};

/// Schema migrations; `petstore_schema.version` counts those applied.
const MIGRATIONS: &[&str] = &["CREATE TABLE pets (
        id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        name        TEXT   NOT NULL,
        category_id BIGINT NOT NULL,
        status      TEXT   CHECK (status IN ('available', 'pending', 'sold'))
    );
    -- Serves the status-filtered list in id order; the unfiltered list walks
    -- the primary key. Either way a page costs O(limit), not O(catalogue).
    CREATE INDEX pets_by_status ON pets (status, id);"];

/// Serialises migrations between instances starting at the same time.
const MIGRATION_LOCK: i64 = 0x7065_7473_746f_7265; // "petstore"

/// How long a request waits for a connection, or for one to be made, before
/// it fails with 503.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

const SELECT_PET: &str = "SELECT id, name, category_id, status FROM pets";

/// The PostgreSQL implementation of [`PetStore`].
pub struct PostgresStore {
    pool: Pool,
}

impl PostgresStore {
    /// Connects (failing fast when the database is unreachable) and brings
    /// the schema up to date.
    pub async fn open(url: &PostgresUrl) -> Result<PostgresStore, StoreError> {
        let describe = |e: &dyn std::fmt::Display| StoreError(format!("{url}: {e}"));
        let mut config: tokio_postgres::Config = url.url().parse().map_err(|e| describe(&e))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECTION_TIMEOUT);
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(url.pool_size())
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECTION_TIMEOUT))
            .create_timeout(Some(CONNECTION_TIMEOUT))
            .recycle_timeout(Some(CONNECTION_TIMEOUT))
            .build()
            .map_err(|e| describe(&e))?;
        let mut client = pool.get().await.map_err(|e| describe(&cause(&e)))?;
        migrate(&mut client).await.map_err(|e| describe(&e))?;
        Ok(PostgresStore { pool })
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(|e| StoreError(cause(&e)))
    }
}

/// The most useful description of a pool error: the database's own error
/// when there is one, not only "backend error".
fn cause(error: &deadpool_postgres::PoolError) -> String {
    match error {
        deadpool_postgres::PoolError::Backend(e) => sql_error(e),
        other => other.to_string(),
    }
}

fn sql_error(error: &tokio_postgres::Error) -> String {
    match std::error::Error::source(error) {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}

/// Applies the migrations the database lacks under an advisory lock, so
/// that instances starting together migrate once. A database from a newer
/// server is left untouched.
async fn migrate(client: &mut deadpool_postgres::Client) -> Result<(), String> {
    let tx = client.transaction().await.map_err(|e| sql_error(&e))?;
    let run = async {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS petstore_schema (version INTEGER NOT NULL);
             INSERT INTO petstore_schema (version)
                 SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM petstore_schema);",
        )
        .await?;
        let row = tx
            .query_one("SELECT version FROM petstore_schema", &[])
            .await?;
        Ok::<i32, tokio_postgres::Error>(row.get(0))
    };
    let current = usize::try_from(run.await.map_err(|e| sql_error(&e))?).unwrap_or(0);
    if current > MIGRATIONS.len() {
        return Err(format!(
            "the database has schema version {current}, newer than the {} this server knows; \
             upgrade petstore-server (the database was not modified)",
            MIGRATIONS.len()
        ));
    }
    for migration in &MIGRATIONS[current..] {
        tx.batch_execute(migration)
            .await
            .map_err(|e| sql_error(&e))?;
    }
    let version = i32::try_from(MIGRATIONS.len()).expect("few migrations");
    tx.execute("UPDATE petstore_schema SET version = $1", &[&version])
        .await
        .map_err(|e| sql_error(&e))?;
    tx.commit().await.map_err(|e| sql_error(&e))
}

fn pet_from_row(row: &Row) -> Result<Pet, StoreError> {
    let status = match row.get::<_, Option<&str>>(3) {
        None => None,
        Some(text) => Some(
            PetStatus::parse(text)
                .ok_or_else(|| StoreError(format!("unknown status {text:?} in the database")))?,
        ),
    };
    Ok(Pet {
        id: row.get(0),
        name: row.get(1),
        category_id: row.get(2),
        status,
    })
}

#[async_trait::async_trait]
impl PetStore for PostgresStore {
    async fn create(&self, pet: NewPet) -> Result<Pet, StoreError> {
        let client = self.client().await?;
        let insert = client
            .prepare_cached(
                "INSERT INTO pets (name, category_id, status) VALUES ($1, $2, $3) RETURNING id",
            )
            .await
            .map_err(|e| StoreError(sql_error(&e)))?;
        let status = pet.status.map(PetStatus::as_str);
        let row = client
            .query_one(&insert, &[&pet.name, &pet.category_id, &status])
            .await
            .map_err(|e| StoreError(sql_error(&e)))?;
        Ok(Pet::from_new(row.get(0), pet))
    }

    async fn list(&self, limit: u32, status: Option<PetStatus>) -> Result<Vec<Pet>, StoreError> {
        let client = self.client().await?;
        let limit = i64::from(limit);
        let rows = match status {
            None => {
                let query = client
                    .prepare_cached(&format!("{SELECT_PET} ORDER BY id LIMIT $1"))
                    .await
                    .map_err(|e| StoreError(sql_error(&e)))?;
                client.query(&query, &[&limit]).await
            }
            Some(status) => {
                let query = client
                    .prepare_cached(&format!(
                        "{SELECT_PET} WHERE status = $1 ORDER BY id LIMIT $2"
                    ))
                    .await
                    .map_err(|e| StoreError(sql_error(&e)))?;
                client.query(&query, &[&status.as_str(), &limit]).await
            }
        };
        rows.map_err(|e| StoreError(sql_error(&e)))?
            .iter()
            .map(pet_from_row)
            .collect()
    }

    async fn get(&self, id: i64) -> Result<Option<Pet>, StoreError> {
        let client = self.client().await?;
        let query = client
            .prepare_cached(&format!("{SELECT_PET} WHERE id = $1"))
            .await
            .map_err(|e| StoreError(sql_error(&e)))?;
        let row = client
            .query_opt(&query, &[&id])
            .await
            .map_err(|e| StoreError(sql_error(&e)))?;
        row.as_ref().map(pet_from_row).transpose()
    }

    async fn close(&self) {
        self.pool.close();
    }
}
