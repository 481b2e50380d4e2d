//! The store suite: every test runs on SQLite and on PostgreSQL.

use sluice::store::{tenants, Db, StoreError};

async fn sqlite() -> (Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}",
        dir.path().join("nested/dir/sluice.db").display()
    );
    let db = Db::connect(&url).await.unwrap();
    db.migrate().await.unwrap();
    (db, dir)
}

async fn postgres() -> Db {
    let url = crate::services::shared_postgres().fresh_database().await;
    let db = Db::connect(&url).await.unwrap();
    db.migrate().await.unwrap();
    db
}

/// Runs each listed test against both databases.
macro_rules! on_both_databases {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    let (db, _dir) = super::sqlite().await;
                    super::$test(&db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    let db = super::postgres().await;
                    super::$test(&db).await;
                }
            )*
        }
    };
}

on_both_databases!(
    migrations_are_applied_once_and_recorded,
    a_tenant_round_trips,
    tenant_names_are_unique,
    status_changes_are_stored,
    check_constraints_reject_bad_rows,
);

async fn migrations_are_applied_once_and_recorded(db: &Db) {
    db.migrate().await.unwrap(); // a second run is a no-op
    assert_eq!(
        db.applied_migrations().await.unwrap(),
        db.known_migrations()
    );
    db.ping().await.unwrap();
}

async fn a_tenant_round_trips(db: &Db) {
    let created = tenants::insert(db, "acme").await.unwrap();
    assert_eq!(created.status, "active");
    let read = tenants::get(db, &created.id).await.unwrap().unwrap();
    assert_eq!(read, created);
    tenants::insert(db, "beta").await.unwrap();
    let names: Vec<String> = tenants::list(db)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["acme", "beta"]);
    assert!(tenants::get(db, "no-such-id").await.unwrap().is_none());
}

async fn tenant_names_are_unique(db: &Db) {
    tenants::insert(db, "acme").await.unwrap();
    let err = tenants::insert(db, "acme").await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert!(!err.is_transient());
    assert_eq!(tenants::list(db).await.unwrap().len(), 1);
}

async fn status_changes_are_stored(db: &Db) {
    let tenant = tenants::insert(db, "acme").await.unwrap();
    assert!(tenants::set_status(db, &tenant.id, "suspended")
        .await
        .unwrap());
    let read = tenants::get(db, &tenant.id).await.unwrap().unwrap();
    assert_eq!(read.status, "suspended");
    assert!(read.updated_at >= tenant.updated_at);
    assert!(!tenants::set_status(db, "no-such-id", "active")
        .await
        .unwrap());
}

async fn check_constraints_reject_bad_rows(db: &Db) {
    let tenant = tenants::insert(db, "acme").await.unwrap();
    // An unknown status violates the CHECK constraint in both dialects.
    assert!(tenants::set_status(db, &tenant.id, "deleted")
        .await
        .is_err());
    assert_eq!(
        tenants::get(db, &tenant.id).await.unwrap().unwrap().status,
        "active"
    );
}
