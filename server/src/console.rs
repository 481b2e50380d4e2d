//! The server's implementation of the console port ([`app::port::Console`]). Server functions
//! reach it through Leptos context; the admin REST API will call the same service.

use app::port::Console;
use app::status::Status;
use app::AppError;

use crate::health;
use crate::limiter::Limiter;
use crate::store::{self, Db};

/// The console service over the store and the limiter.
#[derive(Debug, Clone)]
pub struct ConsoleService {
    db: Db,
    limiter: Limiter,
    embedded: bool,
}

impl ConsoleService {
    pub fn new(db: Db, limiter: Limiter, embedded: bool) -> Self {
        Self {
            db,
            limiter,
            embedded,
        }
    }
}

#[async_trait::async_trait]
impl Console for ConsoleService {
    async fn status(&self) -> Result<Status, AppError> {
        let readiness = health::probe(&self.db, &self.limiter).await;
        Ok(Status {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            mode: if self.embedded {
                "embedded"
            } else {
                "distributed"
            }
            .to_owned(),
            database: self.db.dialect().as_str().to_owned(),
            limiter: self.limiter.kind().as_str().to_owned(),
            down: readiness.down.iter().map(|d| (*d).to_owned()).collect(),
            checked_at_ms: store::now_ms(),
        })
    }
}
