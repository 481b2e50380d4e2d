//! The harness itself, checked through real commands: the Cluster really has three masters
//! covering every slot, PostgreSQL really has the migrations, a missing binary really fails.

use crate::helpers::spawn_app;
use crate::services::{binary, shared_postgres, RedisCluster, RedisServer};
use sluice::config::Config;
use sluice::store::Db;

#[test]
fn cluster_covers_all_16384_slots_over_three_masters() {
    let cluster = RedisCluster::start();
    for node in &cluster.nodes {
        let info = node.cli(&["CLUSTER", "INFO"]);
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
        assert!(info.contains("cluster_slots_ok:16384"), "{info}");
        assert!(info.contains("cluster_known_nodes:3"), "{info}");
        assert!(info.contains("cluster_size:3"), "{info}");
    }
    // Add up the slot ranges that each master owns, as CLUSTER NODES reports them.
    let nodes = cluster.nodes[0].cli(&["CLUSTER", "NODES"]);
    let mut masters = 0;
    let mut slots = 0;
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if !fields[2].contains("master") {
            continue;
        }
        masters += 1;
        let mut owned = 0;
        for range in &fields[8..] {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            owned += hi.parse::<u32>().unwrap() - lo.parse::<u32>().unwrap() + 1;
        }
        assert!(owned > 0, "a master owns no slot: {line}");
        slots += owned;
    }
    assert_eq!(masters, 3, "{nodes}");
    assert_eq!(slots, 16384, "{nodes}");
}

#[tokio::test]
async fn private_postgres_has_the_migrations_applied() {
    let url = shared_postgres().fresh_database().await;
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(url.clone());
    let app = spawn_app(config).await;
    assert_eq!(app.get("/readyz").await.status(), 200);

    // Look at the database with a separate connection, as an operator would.
    let db = Db::connect(&url).await.unwrap();
    let applied = db.applied_migrations().await.unwrap();
    assert!(!applied.is_empty());
    assert_eq!(applied, db.known_migrations());
    let Db::Postgres(pool) = &db else {
        panic!("expected postgres")
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'public' ORDER BY table_name",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for table in ["api_keys", "audit_events", "rules", "tenants", "users"] {
        assert!(
            tables.iter().any(|t| t == table),
            "{table} missing from {tables:?}"
        );
    }
    let version: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(!version.is_empty());
    app.shutdown().await.unwrap();
}

#[test]
fn private_redis_is_a_real_server_on_its_own_port() {
    let redis = RedisServer::start();
    assert_ne!(redis.port, 6379, "must not use the machine's shared Redis");
    assert_eq!(redis.cli(&["SET", "k", "v"]).trim(), "OK");
    assert_eq!(redis.cli(&["GET", "k"]).trim(), "v");
    let info = redis.cli(&["INFO", "server"]);
    assert!(info.contains(&format!("tcp_port:{}", redis.port)), "{info}");
}

#[test]
fn a_missing_binary_fails_loudly_with_the_install_hint() {
    let panic = std::panic::catch_unwind(|| binary("sluice-no-such-binary")).unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("is not installed"), "{message}");
    assert!(message.contains("scripts/setup"), "{message}");
}
