//! The store suite: every test runs on SQLite and on PostgreSQL.

use app::audit::AuditFilter;
use app::auth::Role;
use app::keys::KeyKind;
use app::rules::{Algorithm, FailureMode, MatchKind, RuleBody, Scope};
use app::tenants::TenantStatus;
use sluice::admin::keys::{KeyBody, RotateBody};
use sluice::admin::{Actor, AdminService};
use sluice::store::keys::NewKey;
use sluice::store::{audit, keys, rules, tenants, users, Db, StoreError};

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
    keys_are_found_by_hash_and_rotate_in_one_transaction,
    key_usage_is_recorded_in_batches,
    rules_round_trip_every_field,
    rules_are_scoped_to_their_tenant,
    audit_events_list_newest_first_per_tenant,
    users_are_unique_by_email_and_tied_to_their_role,
    sessions_round_trip_expire_and_are_deleted,
    a_change_whose_audit_event_fails_is_rolled_back,
    a_rotation_whose_audit_event_fails_changes_no_key,
    every_failure_mode_is_stored,
    every_algorithm_is_stored,
    quotas_round_trip_whatever_column_type_holds_them,
);

/// PostgreSQL stores two of the quotas as INTEGER and one as BIGINT; reading them once failed
/// there (every tenant with quotas set could then load no rules, make no key, take no check).
async fn quotas_round_trip_whatever_column_type_holds_them(db: &Db) {
    use sluice::store::quotas::{self, StoredQuotas};
    let tenant = tenants::insert(db, "acme").await.unwrap();
    assert_eq!(
        quotas::get(db, &tenant.id).await.unwrap(),
        StoredQuotas::default()
    );
    let set = StoredQuotas {
        max_rules: Some(3),
        max_keys: Some(2_000_000_000),
        max_live_buckets: Some(5_000_000_000),
    };
    quotas::set(db, &tenant.id, set).await.unwrap();
    assert_eq!(quotas::get(db, &tenant.id).await.unwrap(), set);
}

/// The `local` failure mode came with a migration (a new CHECK; SQLite rebuilt the table).
async fn every_failure_mode_is_stored(db: &Db) {
    let tenant = tenants::insert(db, "acme").await.unwrap();
    for (i, mode) in [FailureMode::Closed, FailureMode::Open, FailureMode::Local]
        .into_iter()
        .enumerate()
    {
        let mut rule = body(&format!("r{i}"));
        rule.failure_mode = mode;
        let stored = rules::insert(db, &tenant.id, &rule).await.unwrap();
        let read = rules::get(db, &tenant.id, &stored.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.body.failure_mode, mode);
    }
}

/// `concurrency` came with a migration (a new CHECK; SQLite rebuilt the table, keeping the
/// overrides that reference it).
async fn every_algorithm_is_stored(db: &Db) {
    let tenant = tenants::insert(db, "acme").await.unwrap();
    for algorithm in Algorithm::ALL {
        let mut rule = body(algorithm.as_str());
        rule.algorithm = algorithm;
        let stored = rules::insert(db, &tenant.id, &rule).await.unwrap();
        let read = rules::get(db, &tenant.id, &stored.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.body.algorithm, algorithm);
    }
}

/// A transaction that reads, then writes, while another connection writes in between: on
/// SQLite in WAL mode a deferred transaction's first write would then fail at once with
/// "database is locked" (a console rule delete did, in a browser test, while another page's
/// session was saved). `Db::begin` takes the write lock first, so the other write waits.
#[tokio::test]
async fn a_read_then_write_transaction_survives_a_concurrent_write_on_sqlite() {
    let (db, _dir) = sqlite().await;
    let tenant = tenants::insert(&db, "acme").await.unwrap();
    let rule = rules::insert(&db, &tenant.id, &body("r")).await.unwrap();
    let mut tx = db.begin().await.unwrap();
    assert!(rules::get(&mut tx, &tenant.id, &rule.id)
        .await
        .unwrap()
        .is_some());
    // Another connection writes now. It must not get in before this transaction ends.
    let other = {
        let db = db.clone();
        tokio::spawn(async move { tenants::insert(&db, "other").await })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
    while !other.is_finished() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        !other.is_finished(),
        "another connection wrote inside this transaction's read-then-write"
    );
    assert!(rules::delete(&mut tx, &tenant.id, &rule.id).await.unwrap());
    tx.commit().await.unwrap();
    other.await.unwrap().unwrap();
}

/// Runs one statement of the test's own on either database.
async fn execute(db: &Db, sql: &str) {
    match db {
        Db::Sqlite(pool) => {
            sqlx::query(sql).execute(pool).await.unwrap();
        }
        Db::Postgres(pool) => {
            sqlx::query(sql).execute(pool).await.unwrap();
        }
    }
}

/// Makes every audit insert fail: the table is renamed away.
async fn without_audit_table(db: &Db) {
    execute(db, "ALTER TABLE audit_events RENAME TO audit_events_away").await;
}

async fn with_audit_table(db: &Db) {
    execute(db, "ALTER TABLE audit_events_away RENAME TO audit_events").await;
}

/// A rule created, updated or deleted while its audit event cannot be written leaves no
/// trace: the change and its event are one transaction.
async fn a_change_whose_audit_event_fails_is_rolled_back(db: &Db) {
    let body = |name: &str| RuleBody {
        period_ms: 1_000,
        ..body(name)
    };
    let admin = AdminService::offline(db.clone());
    let tenant = admin.create_tenant(&Actor::Cli, "acme").await.unwrap();
    let kept = admin
        .create_rule(&Actor::Cli, &tenant.id, &body("kept"))
        .await
        .unwrap();

    without_audit_table(db).await;
    let created = admin
        .create_rule(&Actor::Cli, &tenant.id, &body("lost"))
        .await;
    let mut changed = body("kept");
    changed.limit = 99;
    let updated = admin
        .update_rule(&Actor::Cli, &tenant.id, &kept.id, &changed)
        .await;
    let deleted = admin.delete_rule(&Actor::Cli, &tenant.id, &kept.id).await;
    let suspended = admin
        .set_tenant_active(&Actor::Cli, &tenant.id, false)
        .await;
    with_audit_table(db).await;

    assert!(created.is_err() && updated.is_err() && deleted.is_err() && suspended.is_err());
    let stored = rules::list(db, &tenant.id).await.unwrap();
    assert_eq!(stored.len(), 1, "only the rule created before: {stored:?}");
    assert_eq!(
        stored[0].body, kept.body,
        "the failed update changed nothing"
    );
    assert_eq!(
        tenants::get(db, &tenant.id).await.unwrap().unwrap().status,
        TenantStatus::Active
    );
    // With the audit table back, the same change goes through with its event.
    admin
        .create_rule(&Actor::Cli, &tenant.id, &body("lost"))
        .await
        .unwrap();
    let events = audit::list(db, Some(&tenant.id), &AuditFilter::default(), 100)
        .await
        .unwrap();
    assert_eq!(
        events.iter().filter(|e| e.action == "rule.create").count(),
        2
    );
}

/// A rotation writes a new key and the old key's expiry; with its audit event failing,
/// neither happens.
async fn a_rotation_whose_audit_event_fails_changes_no_key(db: &Db) {
    let admin = AdminService::offline(db.clone());
    let tenant = admin.create_tenant(&Actor::Cli, "acme").await.unwrap();
    let key = admin
        .create_key(
            &Actor::Cli,
            &tenant.id,
            &KeyBody {
                kind: KeyKind::Check,
                name: "svc".into(),
                hash: hash(1),
                prefix: "sl_chk_01010".into(),
                expires_in_seconds: None,
            },
        )
        .await
        .unwrap();
    let rotation = RotateBody {
        hash: hash(2),
        prefix: "sl_chk_02020".into(),
        grace_seconds: 60,
    };

    without_audit_table(db).await;
    let rotated = admin
        .rotate_key(&Actor::Cli, &tenant.id, &key.id, &rotation)
        .await;
    let revoked = admin.revoke_key(&Actor::Cli, &tenant.id, &key.id).await;
    with_audit_table(db).await;

    assert!(rotated.is_err() && revoked.is_err());
    let old = keys::get(db, &key.id).await.unwrap().unwrap();
    assert_eq!(
        (old.expires_at, old.replaced_by, old.revoked_at),
        (None, None, None)
    );
    assert!(keys::find_by_hash(db, &hash(2)).await.unwrap().is_none());
    let rotated = admin
        .rotate_key(&Actor::Cli, &tenant.id, &key.id, &rotation)
        .await
        .unwrap();
    assert_eq!(
        keys::get(db, &key.id).await.unwrap().unwrap().replaced_by,
        Some(rotated.id)
    );
}

fn body(name: &str) -> RuleBody {
    RuleBody {
        name: name.to_owned(),
        match_kind: MatchKind::Prefix,
        route: Some("GET /users/".to_owned()),
        descriptor: None,
        scope: Scope::Subject,
        algorithm: Algorithm::LeakyBucket,
        limit: 7,
        period_ms: 31_622_400_000,
        burst: Some(9),
        penalty: true,
        failure_mode: FailureMode::Open,
        shadow: true,
        enabled: false,
        allow_override: false,
    }
}

fn check_key<'a>(tenant_id: &'a str, hash: &'a str) -> NewKey<'a> {
    NewKey {
        tenant_id: Some(tenant_id),
        kind: KeyKind::Check,
        name: "svc",
        prefix: "sl_chk_ab",
        hash,
        expires_at: None,
    }
}

fn hash(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

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
    assert_eq!(created.status, TenantStatus::Active);
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
    assert!(tenants::set_status(db, &tenant.id, TenantStatus::Suspended)
        .await
        .unwrap());
    let read = tenants::get(db, &tenant.id).await.unwrap().unwrap();
    assert_eq!(read.status, TenantStatus::Suspended);
    assert!(read.updated_at >= tenant.updated_at);
    assert!(!tenants::set_status(db, "no-such-id", TenantStatus::Active)
        .await
        .unwrap());
}

async fn check_constraints_reject_bad_rows(db: &Db) {
    let tenant = tenants::insert(db, "acme").await.unwrap();
    // An unknown status violates the CHECK constraint in both dialects.
    let sql = "UPDATE tenants SET status = 'deleted' WHERE id = $1";
    let refused = match db {
        Db::Sqlite(pool) => sqlx::query(sql)
            .bind(&tenant.id)
            .execute(pool)
            .await
            .is_err(),
        Db::Postgres(pool) => sqlx::query(sql)
            .bind(&tenant.id)
            .execute(pool)
            .await
            .is_err(),
    };
    assert!(refused);
    assert_eq!(
        tenants::get(db, &tenant.id).await.unwrap().unwrap().status,
        TenantStatus::Active
    );
}

async fn keys_are_found_by_hash_and_rotate_in_one_transaction(db: &Db) {
    let tenant = tenants::insert(db, "acme").await.unwrap();
    let (h1, h2) = (hash(1), hash(2));
    let key = keys::insert(db, &check_key(&tenant.id, &h1)).await.unwrap();
    assert_eq!(keys::find_by_hash(db, &h1).await.unwrap().unwrap(), key);
    assert!(keys::find_by_hash(db, &hash(9)).await.unwrap().is_none());
    let duplicate = keys::insert(db, &check_key(&tenant.id, &h1))
        .await
        .unwrap_err();
    assert!(matches!(duplicate, StoreError::Conflict(_)));

    let grace_until = sluice::store::now_ms() + 5_000;
    let mut tx = db.begin().await.unwrap();
    let rotated = keys::rotate(&mut tx, &key.id, &check_key(&tenant.id, &h2), grace_until)
        .await
        .unwrap()
        .expect("a live key rotates");
    tx.commit().await.unwrap();
    let old = keys::get(db, &key.id).await.unwrap().unwrap();
    assert_eq!(old.expires_at, Some(grace_until));
    assert_eq!(old.replaced_by.as_deref(), Some(rotated.id.as_str()));
    // A failed rotation (its new hash already exists) changes nothing.
    let mut tx = db.begin().await.unwrap();
    assert!(keys::rotate(
        &mut tx,
        &rotated.id,
        &check_key(&tenant.id, &h1),
        grace_until
    )
    .await
    .is_err());
    drop(tx);
    assert_eq!(
        keys::get(db, &rotated.id)
            .await
            .unwrap()
            .unwrap()
            .expires_at,
        None
    );
    assert_eq!(
        keys::list_for_tenant(db, &tenant.id).await.unwrap().len(),
        2
    );

    assert!(keys::revoke(db, &rotated.id).await.unwrap());
    assert!(
        !keys::revoke(db, &rotated.id).await.unwrap(),
        "already revoked"
    );
    assert!(!keys::get(db, &rotated.id)
        .await
        .unwrap()
        .unwrap()
        .is_live(sluice::store::now_ms()));
    // A revoked key does not rotate, even when the caller read it live before: nothing of
    // the rotation is written.
    let mut tx = db.begin().await.unwrap();
    let (h3, keys_before) = (
        hash(3),
        keys::list_for_tenant(db, &tenant.id).await.unwrap().len(),
    );
    assert!(keys::rotate(
        &mut tx,
        &rotated.id,
        &check_key(&tenant.id, &h3),
        grace_until
    )
    .await
    .unwrap()
    .is_none());
    drop(tx);
    assert!(keys::find_by_hash(db, &h3).await.unwrap().is_none());
    assert_eq!(
        keys::list_for_tenant(db, &tenant.id).await.unwrap().len(),
        keys_before
    );
}

async fn key_usage_is_recorded_in_batches(db: &Db) {
    let tenant = tenants::insert(db, "acme").await.unwrap();
    let key = keys::insert(db, &check_key(&tenant.id, &hash(4)))
        .await
        .unwrap();
    assert_eq!(key.last_used_at, None);
    keys::touch(db, std::slice::from_ref(&key.id), 1_234)
        .await
        .unwrap();
    assert_eq!(
        keys::get(db, &key.id).await.unwrap().unwrap().last_used_at,
        Some(1_234)
    );
}

async fn rules_round_trip_every_field(db: &Db) {
    let tenant = tenants::insert(db, "acme").await.unwrap();
    let created = rules::insert(db, &tenant.id, &body("users")).await.unwrap();
    let read = rules::get(db, &tenant.id, &created.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read, created);
    assert_eq!(read.body, body("users"));

    let mut changed = body("users-v2");
    changed.match_kind = MatchKind::All;
    changed.route = None;
    changed.burst = None;
    changed.algorithm = Algorithm::SlidingLog;
    // The store keeps what it is given (the admin service validates); the flags too.
    changed.allow_override = true;
    changed.shadow = !changed.shadow;
    let updated = rules::update(db, &tenant.id, &created.id, &changed)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(updated.body, changed);
    assert!(updated.updated_at >= created.updated_at);
    assert!(matches!(
        rules::insert(db, &tenant.id, &changed).await.unwrap_err(),
        StoreError::Conflict(_)
    ));
    assert!(rules::delete(db, &tenant.id, &created.id).await.unwrap());
    assert!(rules::list(db, &tenant.id).await.unwrap().is_empty());
}

async fn rules_are_scoped_to_their_tenant(db: &Db) {
    let a = tenants::insert(db, "a").await.unwrap();
    let b = tenants::insert(db, "b").await.unwrap();
    let rule = rules::insert(db, &a.id, &body("r")).await.unwrap();
    rules::insert(db, &b.id, &body("r")).await.unwrap(); // names are unique per tenant only
    assert!(rules::get(db, &b.id, &rule.id).await.unwrap().is_none());
    assert!(rules::update(db, &b.id, &rule.id, &body("x"))
        .await
        .unwrap()
        .is_none());
    assert!(!rules::delete(db, &b.id, &rule.id).await.unwrap());
    assert_eq!(rules::list(db, &a.id).await.unwrap().len(), 1);
}

async fn audit_events_list_newest_first_per_tenant(db: &Db) {
    let a = tenants::insert(db, "a").await.unwrap();
    for action in ["rule.create", "rule.update"] {
        audit::record(
            db,
            Some(&a.id),
            "key:sl_adm_x",
            action,
            Some("r1"),
            &serde_json::json!({ "n": 1 }),
        )
        .await
        .unwrap();
    }
    audit::record(db, None, "cli", "key.create", None, &serde_json::json!({}))
        .await
        .unwrap();
    let any = AuditFilter::default();
    let events = audit::list(db, Some(&a.id), &any, 10).await.unwrap();
    let actions: Vec<&str> = events.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["rule.update", "rule.create"]);
    assert_eq!(events[0].detail, r#"{"n":1}"#);
    assert_eq!(audit::list(db, None, &any, 10).await.unwrap().len(), 3);
    assert_eq!(audit::list(db, None, &any, 1).await.unwrap().len(), 1);

    // Filters: actors containing a text in any case, exact action, an inclusive time range
    // and the page before an id, combined.
    let count = |filter: AuditFilter, tenant: Option<String>| async move {
        audit::list(db, tenant.as_deref(), &filter, 10)
            .await
            .unwrap()
            .len()
    };
    let by = |actor: &str| AuditFilter {
        actor: Some(actor.into()),
        ..AuditFilter::default()
    };
    assert_eq!(count(by("cli"), None).await, 1);
    assert_eq!(count(by("cli"), Some(a.id.clone())).await, 0);
    assert_eq!(count(by("key:sl_adm_x"), None).await, 2);
    assert_eq!(
        count(by("KEY:SL_ADM"), None).await,
        2,
        "contains, in any case"
    );
    assert_eq!(count(by("adm_x"), None).await, 2);
    assert_eq!(
        count(by("key:sl%"), None).await,
        0,
        "% is text, not a wildcard"
    );
    assert_eq!(
        count(by("key_sl"), None).await,
        0,
        "_ is text, not a wildcard"
    );
    let older = AuditFilter {
        before_id: Some(events[0].id),
        ..AuditFilter::default()
    };
    let page = audit::list(db, Some(&a.id), &older, 10).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.id).collect::<Vec<_>>(),
        [events[1].id],
        "the page after the newest event"
    );
    let action = AuditFilter {
        action: Some("rule.update".into()),
        ..by("key:sl_adm_x")
    };
    assert_eq!(count(action, Some(a.id.clone())).await, 1);
    let at = events[0].at;
    let range = |since_ms, until_ms| AuditFilter {
        since_ms,
        until_ms,
        ..AuditFilter::default()
    };
    assert_eq!(
        count(range(Some(at), Some(at)), Some(a.id.clone())).await,
        events.iter().filter(|e| e.at == at).count()
    );
    assert_eq!(
        count(range(Some(at + 1), None), Some(a.id.clone())).await,
        0
    );
    assert_eq!(count(range(None, Some(at - 100_000)), None).await, 0);
}

async fn users_are_unique_by_email_and_tied_to_their_role(db: &Db) {
    let tenant = tenants::insert(db, "acme").await.unwrap();
    let admin = users::insert(
        db,
        " Ada@Example.com ",
        "$argon2id$x",
        Role::TenantAdmin,
        Some(&tenant.id),
    )
    .await
    .unwrap();
    assert_eq!(admin.email, "ada@example.com");
    assert_eq!(
        users::find_by_email(db, "ADA@example.com")
            .await
            .unwrap()
            .unwrap(),
        admin
    );
    let duplicate = users::insert(db, "ada@example.com", "h", Role::Operator, None)
        .await
        .unwrap_err();
    assert!(matches!(duplicate, StoreError::Conflict(_)));
    // The schema ties roles to tenants: an operator has none, a tenant admin has one.
    assert!(
        users::insert(db, "op@example.com", "h", Role::Operator, Some(&tenant.id))
            .await
            .is_err()
    );
    assert!(
        users::insert(db, "ta@example.com", "h", Role::TenantAdmin, None)
            .await
            .is_err()
    );
    users::insert(db, "op@example.com", "h", Role::Operator, None)
        .await
        .unwrap();
    assert_eq!(users::list(db).await.unwrap().len(), 2);
    assert!(users::find_by_email(db, "nobody@example.com")
        .await
        .unwrap()
        .is_none());
}

async fn sessions_round_trip_expire_and_are_deleted(db: &Db) {
    use sluice::store::sessions::SqlSessionStore;
    use tower_sessions::session::{Id, Record};
    use tower_sessions::session_store::SessionStore;

    let store = SqlSessionStore::new(db.clone());
    let in_an_hour = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let mut record = Record {
        id: Id::default(),
        data: Default::default(),
        expiry_date: in_an_hour,
    };
    record
        .data
        .insert("user_id".into(), serde_json::json!("u-1"));
    store.create(&mut record).await.unwrap();
    let loaded = store.load(&record.id).await.unwrap().unwrap();
    assert_eq!(loaded.data, record.data);
    assert_eq!(
        loaded.expiry_date.unix_timestamp(),
        in_an_hour.unix_timestamp()
    );

    // save() updates in place.
    record
        .data
        .insert("user_id".into(), serde_json::json!("u-2"));
    store.save(&record).await.unwrap();
    assert_eq!(
        store.load(&record.id).await.unwrap().unwrap().data["user_id"],
        "u-2"
    );

    // An expired session is never loaded, and the cleanup deletes it.
    let mut old = Record {
        id: Id::default(),
        data: Default::default(),
        expiry_date: time::OffsetDateTime::now_utc() - time::Duration::seconds(1),
    };
    store.create(&mut old).await.unwrap();
    assert!(store.load(&old.id).await.unwrap().is_none());
    assert_eq!(store.delete_expired().await.unwrap(), 1);

    store.delete(&record.id).await.unwrap();
    assert!(store.load(&record.id).await.unwrap().is_none());
    // A session ended while one of its requests was in flight stays ended when that
    // request's response saves it (save only updates; it once wrote the row back).
    store.save(&record).await.unwrap();
    assert!(store.load(&record.id).await.unwrap().is_none());

    // Every session of one user ends at once; another user's stay.
    let mut mine = Vec::new();
    for user in ["u-7", "u-7", "u-8"] {
        let mut r = Record {
            id: Id::default(),
            data: Default::default(),
            expiry_date: in_an_hour,
        };
        r.data.insert("user_id".into(), serde_json::json!(user));
        store.create(&mut r).await.unwrap();
        mine.push(r);
    }
    assert_eq!(
        sluice::store::sessions::end_for_user(db, "u-7")
            .await
            .unwrap(),
        2
    );
    assert!(store.load(&mine[0].id).await.unwrap().is_none());
    assert!(store.load(&mine[1].id).await.unwrap().is_none());
    assert!(store.load(&mine[2].id).await.unwrap().is_some());

    // A user's sessions are listed with when they began and their client, and all but one
    // end at once.
    use sluice::store::sessions::{end_others, id_hash, list_for_user};
    let mut kept = Vec::new();
    for (began, client) in [(1_000_i64, "192.0.2.1, A"), (2_000, "192.0.2.2, B")] {
        let mut r = Record {
            id: Id::default(),
            data: Default::default(),
            expiry_date: in_an_hour,
        };
        r.data.insert("user_id".into(), serde_json::json!("u-9"));
        r.data
            .insert("signed_in_at".into(), serde_json::json!(began));
        r.data.insert("client".into(), serde_json::json!(client));
        store.create(&mut r).await.unwrap();
        kept.push(r);
    }
    let listed = list_for_user(db, "u-9").await.unwrap();
    let mut seen: Vec<(Option<i64>, Option<String>)> = listed
        .iter()
        .map(|s| (s.created_at, s.client.clone()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            (Some(1_000), Some("192.0.2.1, A".to_owned())),
            (Some(2_000), Some("192.0.2.2, B".to_owned()))
        ]
    );
    assert!(listed.iter().all(|s| s.last_seen_at.is_some()));
    // A save (every request) keeps when it began and its client, and moves "last seen".
    let seen_before = listed
        .iter()
        .find(|s| s.id_hash == id_hash(&kept[0].id))
        .unwrap()
        .last_seen_at
        .unwrap();
    store.save(&kept[0]).await.unwrap();
    let saved = list_for_user(db, "u-9").await.unwrap();
    let saved = saved
        .iter()
        .find(|s| s.id_hash == id_hash(&kept[0].id))
        .unwrap();
    assert_eq!(
        (saved.created_at, saved.client.as_deref()),
        (Some(1_000), Some("192.0.2.1, A"))
    );
    assert!(saved.last_seen_at.unwrap() >= seen_before);
    let keep = id_hash(&kept[1].id);
    assert_eq!(end_others(db, "u-9", &keep).await.unwrap(), 1);
    let left = list_for_user(db, "u-9").await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].id_hash, keep);
}
