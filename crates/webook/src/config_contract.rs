//! The configuration contract: every TOML key, `WEBOOK_*` variable and flag that webook has
//! ever documented keeps its name, its layering and its one-line errors, whichever module now
//! owns the setting (the platform or a feature's `settings.rs`).

#![allow(clippy::result_large_err)] // figment's Jail API returns figment::Error by value

use std::{path::PathBuf, time::Duration};

use figment::Jail;
use platform::config::{Config, ConfigArgs, KEYS};

use crate::{app::load_config, auth::AuthSettings};

fn load_in_jail(flags: &ConfigArgs) -> Result<Config, figment::Error> {
    load_config(flags).map_err(|err| err.to_string().into())
}

/// Every key of the platform and of every installed feature.
fn every_key() -> Vec<&'static str> {
    KEYS.iter()
        .chain(crate::app::settings().iter().flat_map(|spec| spec.keys()))
        .copied()
        .collect()
}

/// A valid, non-default value for every key (as an env var would spell it) and the TOML value
/// `--print-config` must then show. Together they form one valid cluster-mode configuration.
const CONTRACT: &[(&str, &str, &str)] = &[
    ("listen", "127.0.0.1:9999", r#""127.0.0.1:9999""#),
    ("data_dir", "/tmp/contract-data", r#""/tmp/contract-data""#),
    (
        "database_url",
        "sqlite:///tmp/contract.db",
        r#""sqlite:///tmp/contract.db""#,
    ),
    (
        "redis_url",
        "redis://127.0.0.1:6390/",
        r#""redis://127.0.0.1:6390/""#,
    ),
    ("redis_prefix", "contract", r#""contract""#),
    (
        "cors_origins",
        "https://a.example, https://b.example",
        r#"["https://a.example", "https://b.example"]"#,
    ),
    ("log", "debug", r#""debug""#),
    ("log_format", "json", r#""json""#),
    ("body_limit_bytes", "2048", "2048"),
    ("request_timeout", "31s", r#""31s""#),
    ("http_header_timeout", "11s", r#""11s""#),
    ("http_idle_timeout", "2m", r#""2m""#),
    ("http_max_connections", "77", "77"),
    ("http_max_connections_per_client", "9", "9"),
    ("ops_listen", "127.0.0.1:9998", r#""127.0.0.1:9998""#),
    (
        "metrics_allowed_networks",
        "10.1.0.0/16, 192.0.2.7",
        r#"["10.1.0.0/16", "192.0.2.7"]"#,
    ),
    (
        "metrics_token",
        "metrics-token-0123456789",
        r#""<redacted>""#,
    ),
    ("shutdown_timeout", "29s", r#""29s""#),
    ("database_max_connections", "5", "5"),
    ("database_acquire_timeout", "400ms", r#""400ms""#),
    ("trusted_proxies", "10.0.0.0/8", r#"["10.0.0.0/8"]"#),
    ("client_ipv6_prefix", "56", "56"),
    ("debug_endpoints", "true", "true"),
    ("purge_schedule", "@every 11m", r#""@every 11m""#),
    ("cache_memory_bytes", "2097152", "2097152"),
    ("role", "worker", r#""worker""#),
    (
        "otlp_endpoint",
        "http://127.0.0.1:4318",
        r#""http://127.0.0.1:4318""#,
    ),
    ("otlp_sampling_ratio", "0.25", "0.25"),
    ("otlp_service_name", "contract", r#""contract""#),
    (
        "jwt_access_secret",
        "access-secret-0123456789abcdef0123456789",
        r#""<redacted>""#,
    ),
    (
        "jwt_refresh_secret",
        "refresh-secret-0123456789abcdef012345678",
        r#""<redacted>""#,
    ),
    ("admins", "5, 6", "[5, 6]"),
    ("access_token_ttl", "20m", r#""20m""#),
    ("refresh_token_ttl", "2days", r#""2days""#),
    ("refresh_retry_window", "45s", r#""45s""#),
    ("auth_rate_limit", "11", "11"),
    ("auth_rate_window", "2m", r#""2m""#),
    ("write_rate_limit", "121", "121"),
    ("write_rate_window", "3m", r#""3m""#),
    ("anonymous_reading", "false", "false"),
    ("anonymous_read_window", "2h", r#""2h""#),
    (
        "site_url",
        "https://contract.example",
        r#""https://contract.example""#,
    ),
    (
        "wechat_app_id",
        "wxcontract0123456",
        r#""wxcontract0123456""#,
    ),
    (
        "wechat_app_secret",
        "contract-wechat-secret",
        r#""<redacted>""#,
    ),
    (
        "wechat_redirect_uri",
        "https://contract.example/oauth2/wechat/callback",
        r#""https://contract.example/oauth2/wechat/callback""#,
    ),
    (
        "wechat_frontend_url",
        "https://contract.example/",
        r#""https://contract.example/""#,
    ),
    (
        "wechat_authorize_url",
        "https://open.contract.example/connect/qrconnect",
        r#""https://open.contract.example/connect/qrconnect""#,
    ),
    (
        "wechat_api_url",
        "https://api.contract.example",
        r#""https://api.contract.example""#,
    ),
    ("wechat_state_ttl", "5m", r#""5m""#),
    ("wechat_timeout", "3s", r#""3s""#),
    ("job_permits", "17", "17"),
    ("job_heartbeat", "3s", r#""3s""#),
    ("job_lease", "12s", r#""12s""#),
    ("job_poll_max", "2s", r#""2s""#),
    ("job_runs_retention", "10days", r#""10days""#),
    (
        "job_http_allowed_networks",
        "192.168.0.0/16",
        r#"["192.168.0.0/16"]"#,
    ),
    ("ranking_size", "50", "50"),
    ("ranking_window", "3days", r#""3days""#),
    ("ranking_formula", "reddit", r#""reddit""#),
    ("ranking_gravity", "1.8", "1.8"),
    ("ranking_weight_likes", "1.5", "1.5"),
    ("ranking_weight_collects", "2.5", "2.5"),
    ("ranking_weight_reads", "0.1", "0.1"),
    ("ranking_schedule", "@every 2m", r#""@every 2m""#),
    ("ranking_mode", "cron", r#""cron""#),
    ("ranking_refresh", "6s", r#""6s""#),
    ("feed_push_threshold", "500", "500"),
    ("feed_inbox_cap", "2000", "2000"),
    ("comment_rate_limit", "5", "5"),
    ("comment_rate_window", "2m", r#""2m""#),
    ("screening_poll", "5s", r#""5s""#),
    ("moderation_report_limit", "7", "7"),
    ("moderation_report_window", "2h", r#""2h""#),
    ("moderation_new_account_period", "2days", r#""2days""#),
    ("moderation_new_account_write_limit", "9", "9"),
    ("moderation_new_account_window", "30m", r#""30m""#),
    ("tag_max_per_user", "50", "50"),
    ("notifications_retention", "30days", r#""30days""#),
    ("notifications_stream", "10%, 7", r#""10%, 7""#),
    ("live_settings_poll", "5s", r#""5s""#),
    (
        "search_dir",
        "/tmp/contract-search",
        r#""/tmp/contract-search""#,
    ),
    ("search_writer_heap", "64000000", "64000000"),
    ("search_commit_interval", "500ms", r#""500ms""#),
    ("search_commit_gap", "250ms", r#""250ms""#),
    ("search_rate_limit", "30", "30"),
    ("search_rate_window", "2m", r#""2m""#),
    (
        "search_synonyms",
        "/srv/webook/synonyms.txt",
        r#""/srv/webook/synonyms.txt""#,
    ),
    ("search_synonyms_builtin", "false", "false"),
    (
        "sms_providers",
        "aliyun, tencent",
        r#"["aliyun", "tencent"]"#,
    ),
    ("sms_strategy", "round_robin", r#""round_robin""#),
    ("sms_allow_log_provider", "true", "true"),
    ("sms_timeout", "4s", r#""4s""#),
    ("sms_circuit_failures", "4", "4"),
    ("sms_circuit_open", "31s", r#""31s""#),
    ("sms_provider_rate_limit", "20", "20"),
    ("sms_provider_rate_window", "2s", r#""2s""#),
    (
        "sms_tencent_endpoint",
        "https://sms.example",
        r#""https://sms.example""#,
    ),
    ("sms_tencent_region", "ap-beijing", r#""ap-beijing""#),
    ("sms_tencent_secret_id", "AKIDcontract", r#""AKIDcontract""#),
    ("sms_tencent_secret_key", "tencent-key", r#""<redacted>""#),
    ("sms_tencent_sdk_app_id", "1400123456", r#""1400123456""#),
    ("sms_tencent_sign_name", "webook", r#""webook""#),
    ("sms_tencent_template_id", "123456", r#""123456""#),
    (
        "sms_aliyun_endpoint",
        "https://dysms.example",
        r#""https://dysms.example""#,
    ),
    (
        "sms_aliyun_access_key_id",
        "LTAIcontract",
        r#""LTAIcontract""#,
    ),
    (
        "sms_aliyun_access_key_secret",
        "aliyun-key",
        r#""<redacted>""#,
    ),
    ("sms_aliyun_sign_name", "webook", r#""webook""#),
    ("sms_aliyun_template_code", "SMS_123", r#""SMS_123""#),
    ("sms_code_ttl", "5m", r#""5m""#),
    ("sms_code_resend_interval", "30s", r#""30s""#),
    ("sms_code_max_attempts", "5", "5"),
    ("sms_code_daily_limit_per_phone", "7", "7"),
    ("sms_code_daily_limit_per_ip", "70", "70"),
    ("sms_code_daily_limit_per_ip_phone", "2", "2"),
    ("sms_code_budget", "150", "150"),
    ("sms_code_budget_window", "2m", r#""2m""#),
    ("sms_retry_schedule", "@every 7s", r#""@every 7s""#),
    ("pay_provider", "fake", r#""fake""#),
    ("pay_allow_fake", "true", "true"),
    ("pay_expiry", "20m", r#""20m""#),
    (
        "pay_fake_base_url",
        "http://pay.example:8080",
        r#""http://pay.example:8080""#,
    ),
    ("pay_sweep_schedule", "@every 2m", r#""@every 2m""#),
    (
        "pay_reconcile_schedule",
        "0 0 11 * * *",
        r#""0 0 11 * * *""#,
    ),
    ("pay_reconcile_lookback", "3days", r#""3days""#),
    ("pay_watch_schedule", "@every 20s", r#""@every 20s""#),
    ("pay_query_after", "2m, 6m", r#"["2m", "6m"]"#),
    (
        "wechatpay_endpoint",
        "https://wxpay.example",
        r#""https://wxpay.example""#,
    ),
    ("wechatpay_mchid", "1900000109", r#""1900000109""#),
    ("wechatpay_appid", "wxcontract0001", r#""wxcontract0001""#),
    ("wechatpay_merchant_serial", "5157F09E", r#""5157F09E""#),
    ("wechatpay_merchant_key", "contract-key", r#""<redacted>""#),
    ("wechatpay_api_v3_key", "contract-v3-key", r#""<redacted>""#),
    (
        "wechatpay_platform_serial",
        "PUB_KEY_ID_01",
        r#""PUB_KEY_ID_01""#,
    ),
    (
        "wechatpay_platform_public_key",
        "contract-public-key",
        r#""contract-public-key""#,
    ),
    (
        "wechatpay_platform_keys",
        "PUB_KEY_ID_02=contract-key-2, PUB_KEY_ID_03=contract-key-3",
        r#"{ PUB_KEY_ID_02 = "contract-key-2", PUB_KEY_ID_03 = "contract-key-3" }"#,
    ),
    ("wechatpay_platform_mode", "certificate", r#""certificate""#),
    ("wechatpay_platform_ca", "contract-ca", r#""contract-ca""#),
    ("wechatpay_certificate_refresh", "6h", r#""6h""#),
    (
        "wechatpay_notify_url",
        "https://example.com/pay/wechat/notify",
        r#""https://example.com/pay/wechat/notify""#,
    ),
    ("wechatpay_timeout", "4s", r#""4s""#),
    ("reward_share_bps", "500", "500"),
    ("reward_long_poll", "5s", r#""5s""#),
    ("reward_rate_limit", "6", "6"),
    ("reward_rate_window", "2m", r#""2m""#),
    ("db_move_pause_deadline", "3s", r#""3s""#),
    (
        "backup_dir",
        "/tmp/contract-backups",
        r#""/tmp/contract-backups""#,
    ),
    ("backup_schedule", "0 15 3 * * *", r#""0 15 3 * * *""#),
    ("backup_keep", "14", "14"),
];

/// `--print-config`'s TOML, parsed.
fn printed(config: &Config) -> toml::Table {
    let text = config.to_redacted_toml().unwrap();
    text.parse::<toml::Table>()
        .unwrap_or_else(|err| panic!("{err}\n{text}"))
}

fn expected_value(toml_value: &str) -> toml::Value {
    format!("v = {toml_value}").parse::<toml::Table>().unwrap()["v"].clone()
}

#[test]
fn the_contract_names_every_key_once() {
    let mut contract: Vec<&str> = CONTRACT.iter().map(|(key, _, _)| *key).collect();
    contract.sort_unstable();
    let mut keys = every_key();
    keys.sort_unstable();
    assert_eq!(
        contract, keys,
        "every key needs a line in CONTRACT, and only keys"
    );
}

#[test]
fn every_key_is_read_from_its_env_var_and_shown_by_print_config() {
    Jail::expect_with(|jail| {
        for (key, value, _) in CONTRACT {
            jail.set_env(format!("WEBOOK_{}", key.to_uppercase()), value);
        }
        let shown = printed(&load_in_jail(&ConfigArgs::default())?);
        let mut shown_keys: Vec<&str> = shown.keys().map(String::as_str).collect();
        shown_keys.sort_unstable();
        let mut keys = every_key();
        keys.sort_unstable();
        assert_eq!(shown_keys, keys, "--print-config shows every key");
        for (key, _, expected) in CONTRACT {
            assert_eq!(shown[*key], expected_value(expected), "{key}");
        }
        Ok(())
    });
}

#[test]
fn every_key_is_read_from_the_config_file() {
    Jail::expect_with(|jail| {
        let file: String = CONTRACT
            .iter()
            .map(|(key, _, expected)| {
                // Secrets are written as themselves; the file holds the real value.
                let value = if expected.contains("redacted") {
                    CONTRACT
                        .iter()
                        .find(|(k, _, _)| k == key)
                        .map(|(_, env, _)| format!("{env:?}"))
                        .unwrap()
                } else {
                    expected.to_string()
                };
                format!("{key} = {value}\n")
            })
            .collect();
        jail.create_file("webook.toml", &file)?;
        let shown = printed(&load_in_jail(&ConfigArgs::default())?);
        for (key, _, expected) in CONTRACT {
            assert_eq!(shown[*key], expected_value(expected), "{key}");
        }
        Ok(())
    });
}

#[test]
fn every_flag_sets_its_key() {
    Jail::expect_with(|jail| {
        jail.create_file("other.toml", "redis_prefix = \"from-other\"")?;
        jail.set_env("WEBOOK_JWT_ACCESS_SECRET", "a".repeat(40));
        jail.set_env("WEBOOK_JWT_REFRESH_SECRET", "r".repeat(40));
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from([
            "webook",
            "--config",
            "other.toml",
            "--listen",
            "127.0.0.1:9101",
            "--data-dir",
            "/tmp/flag-data",
            "--database-url",
            "sqlite:///tmp/flag.db",
            "--redis-url",
            "redis://127.0.0.1:6391/",
            "serve",
        ])
        .map_err(|err| err.to_string())?;
        let config = load_in_jail(&cli.config)?;
        assert_eq!(config.redis_prefix, "from-other", "--config names the file");
        assert_eq!(config.listen.to_string(), "127.0.0.1:9101");
        assert_eq!(config.data_dir, PathBuf::from("/tmp/flag-data"));
        assert_eq!(config.database_url(), "sqlite:///tmp/flag.db");
        assert_eq!(config.redis_url.as_deref(), Some("redis://127.0.0.1:6391/"));
        Ok(())
    });
}

#[test]
fn every_section_serialises_exactly_its_keys() {
    let config = Config {
        redis_url: Some("redis://127.0.0.1/".into()),
        ops_listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 9090))),
        otlp_endpoint: Some("http://127.0.0.1:4318".into()),
        ..Config::with_defaults(&crate::app::settings())
    };
    let shown = printed(&{
        let mut config = config;
        let settings = config.settings_mut::<AuthSettings>();
        settings.jwt_access_secret = Some(platform::config::Secret::new("a".repeat(40)));
        settings.jwt_refresh_secret = Some(platform::config::Secret::new("r".repeat(40)));
        let wechat = config.settings_mut::<crate::wechat_login::WechatSettings>();
        wechat.wechat_app_id = Some("wx0123456789abcdef".to_owned());
        wechat.wechat_app_secret = Some(platform::config::Secret::new("w".repeat(32)));
        wechat.wechat_redirect_uri = Some("https://example.com/oauth2/wechat/callback".to_owned());
        config
            .settings_mut::<crate::payment::PaymentSettings>()
            .pay_provider = Some(crate::payment::ProviderName::Fake);
        config
    });
    let mut shown_keys: Vec<&str> = shown.keys().map(String::as_str).collect();
    shown_keys.sort_unstable();
    let mut keys = every_key();
    keys.sort_unstable();
    assert_eq!(
        shown_keys, keys,
        "KEYS of each section must list its fields"
    );
}

#[test]
fn defaults_apply_without_any_layer() {
    Jail::expect_with(|_jail| {
        let config = load_in_jail(&ConfigArgs::default())?;
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.data_dir, PathBuf::from("./data"));
        assert_eq!(config.database_url(), "sqlite://./data/webook.db");
        assert!(!config.is_cluster());
        assert_eq!(config.cors_origins, vec!["http://localhost:3000"]);
        Ok(())
    });
}

#[test]
fn each_layer_overrides_the_one_below() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "webook.toml",
            r#"
                listen = "127.0.0.1:9001"
                data_dir = "/from-file"
                log = "debug"
                admins = [7]
                request_timeout = "5s"
                "#,
        )?;
        // File only.
        let config = load_in_jail(&ConfigArgs::default())?;
        assert_eq!(config.listen.to_string(), "127.0.0.1:9001");
        assert_eq!(config.log, "debug");
        assert_eq!(config.request_timeout, Duration::from_secs(5));

        // Env beats file.
        jail.set_env("WEBOOK_LISTEN", "127.0.0.1:9002");
        jail.set_env("WEBOOK_DATA_DIR", "/from-env");
        jail.set_env("WEBOOK_ADMINS", "7");
        assert_eq!(
            load_in_jail(&ConfigArgs::default())?
                .settings::<AuthSettings>()
                .unwrap()
                .admins,
            vec![7]
        );
        jail.set_env("WEBOOK_ADMINS", "3, 4");
        let config = load_in_jail(&ConfigArgs::default())?;
        assert_eq!(config.listen.to_string(), "127.0.0.1:9002");
        assert_eq!(config.data_dir, PathBuf::from("/from-env"));
        assert_eq!(
            config.settings::<AuthSettings>().unwrap().admins,
            vec![3, 4]
        );
        assert_eq!(config.log, "debug", "untouched keys keep the file's value");

        // Flags beat env.
        let flags = ConfigArgs {
            listen: Some("127.0.0.1:9003".into()),
            ..ConfigArgs::default()
        };
        let config = load_in_jail(&flags)?;
        assert_eq!(config.listen.to_string(), "127.0.0.1:9003");
        assert_eq!(config.data_dir, PathBuf::from("/from-env"));
        Ok(())
    });
}

#[test]
fn config_file_path_comes_from_env_or_flag() {
    Jail::expect_with(|jail| {
        jail.create_file("other.toml", "listen = \"127.0.0.1:7000\"")?;
        let flags = ConfigArgs {
            config: Some("other.toml".into()),
            ..ConfigArgs::default()
        };
        assert_eq!(load_in_jail(&flags)?.listen.to_string(), "127.0.0.1:7000");

        let missing = ConfigArgs {
            config: Some("missing.toml".into()),
            ..ConfigArgs::default()
        };
        let err = load_config(&missing).unwrap_err().to_string();
        assert!(
            err.contains("missing.toml") && err.contains("does not exist"),
            "{err}"
        );
        Ok(())
    });
}

#[test]
fn unrelated_webook_env_vars_are_ignored_but_unknown_file_keys_are_not() {
    Jail::expect_with(|jail| {
        jail.set_env("WEBOOK_TEST_DATABASE_URL", "postgres://x@y/z");
        load_in_jail(&ConfigArgs::default())?;

        jail.create_file("webook.toml", "lisen = \"127.0.0.1:1\"")?;
        let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
        assert!(err.contains("lisen"), "{err}");
        Ok(())
    });
}

#[test]
fn values_that_would_misbehave_at_run_time_are_refused_at_start() {
    Jail::expect_with(|jail| {
        let refused = |jail: &mut Jail, key: &str, value: &str, expected: &[&str]| {
            jail.set_env(key, value);
            let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
            for part in expected {
                assert!(err.contains(part), "{key}={value}: {err}");
            }
            assert!(!err.contains('\n'), "one line: {err}");
            std::env::remove_var(key);
        };
        refused(
            jail,
            "WEBOOK_REQUEST_TIMEOUT",
            "0s",
            &["request_timeout", "above 0"],
        );
        refused(
            jail,
            "WEBOOK_HTTP_HEADER_TIMEOUT",
            "0s",
            &["http_header_timeout"],
        );
        refused(
            jail,
            "WEBOOK_DATABASE_ACQUIRE_TIMEOUT",
            "40s",
            &["database_acquire_timeout", "request_timeout"],
        );
        refused(
            jail,
            "WEBOOK_CORS_ORIGINS",
            "not a url",
            &["cors_origins", "not a URL"],
        );
        refused(
            jail,
            "WEBOOK_ADMINS",
            "ops@example.com",
            &["admins", "webook admin grant"],
        );
        refused(jail, "WEBOOK_ADMINS", "-1", &["admins", "positive"]);
        refused(
            jail,
            "WEBOOK_WRITE_RATE_WINDOW",
            "0s",
            &["write_rate_window"],
        );
        refused(
            jail,
            "WEBOOK_WECHAT_APP_ID",
            "wx0123456789abcdef",
            &["wechat_app_id", "wechat_app_secret", "or neither"],
        );
        jail.set_env("WEBOOK_WECHAT_APP_ID", "wx0123456789abcdef");
        jail.set_env("WEBOOK_WECHAT_APP_SECRET", "wechat-app-secret");
        jail.set_env(
            "WEBOOK_WECHAT_REDIRECT_URI",
            "https://example.com/oauth2/wechat/callback",
        );
        refused(
            jail,
            "WEBOOK_WECHAT_TIMEOUT",
            "30s",
            &["wechat_timeout", "request_timeout"],
        );
        for key in [
            "WEBOOK_WECHAT_APP_ID",
            "WEBOOK_WECHAT_APP_SECRET",
            "WEBOOK_WECHAT_REDIRECT_URI",
        ] {
            std::env::remove_var(key);
        }
        refused(
            jail,
            "WEBOOK_WECHAT_FRONTEND_URL",
            "localhost:3000",
            &["wechat_frontend_url", "http"],
        );
        refused(
            jail,
            "WEBOOK_CLIENT_IPV6_PREFIX",
            "16",
            &[
                "client_ipv6_prefix",
                "WEBOOK_CLIENT_IPV6_PREFIX",
                "32 to 128",
            ],
        );
        refused(
            jail,
            "WEBOOK_SMS_CODE_DAILY_LIMIT_PER_IP_PHONE",
            "11",
            &["sms_code_daily_limit_per_ip_phone", "at most"],
        );
        refused(
            jail,
            "WEBOOK_SMS_CODE_BUDGET_WINDOW",
            "0s",
            &["sms_code_budget_window"],
        );
        refused(
            jail,
            "WEBOOK_REWARD_RATE_WINDOW",
            "0s",
            &["reward_rate_window", "WEBOOK_REWARD_RATE_WINDOW"],
        );
        refused(
            jail,
            "WEBOOK_COMMENT_RATE_WINDOW",
            "0s",
            &["comment_rate_window"],
        );
        refused(
            jail,
            "WEBOOK_SCREENING_POLL",
            "10ms",
            &["screening_poll", "at least 100ms"],
        );
        refused(
            jail,
            "WEBOOK_MODERATION_REPORT_LIMIT",
            "0",
            &["moderation_report_limit", "WEBOOK_MODERATION_REPORT_LIMIT"],
        );
        refused(
            jail,
            "WEBOOK_MODERATION_NEW_ACCOUNT_WINDOW",
            "0s",
            &["moderation_new_account_window"],
        );
        for bad in ["0", "100001"] {
            refused(
                jail,
                "WEBOOK_TAG_MAX_PER_USER",
                bad,
                &["tag_max_per_user", "1-100000"],
            );
        }
        refused(
            jail,
            "WEBOOK_NOTIFICATIONS_RETENTION",
            "10m",
            &["notifications_retention", "at least 1h"],
        );
        refused(
            jail,
            "WEBOOK_NOTIFICATIONS_STREAM",
            "150%",
            &["notifications_stream", "0% to 100%"],
        );
        refused(
            jail,
            "WEBOOK_LIVE_SETTINGS_POLL",
            "10ms",
            &["live_settings_poll", "at least 100ms"],
        );
        refused(
            jail,
            "WEBOOK_SEARCH_WRITER_HEAP",
            "1000",
            &["search_writer_heap"],
        );
        refused(
            jail,
            "WEBOOK_SEARCH_COMMIT_INTERVAL",
            "2s",
            &["search_commit_interval", "within a second"],
        );
        refused(
            jail,
            "WEBOOK_SEARCH_COMMIT_GAP",
            "5s",
            &["search_commit_gap", "at most 1s"],
        );
        refused(
            jail,
            "WEBOOK_SEARCH_RATE_WINDOW",
            "0s",
            &["search_rate_window"],
        );
        refused(
            jail,
            "WEBOOK_JOB_HTTP_ALLOWED_NETWORKS",
            "10.0.0.0/33",
            &["job_http_allowed_networks", "CIDR"],
        );
        refused(jail, "WEBOOK_OPS_LISTEN", "127.0.0.1:8080", &["ops_listen"]);
        // Absurd values (issue 46, item 16): a timeout that would overflow the clock, one
        // secret for both token kinds, a proxy list that trusts everybody.
        refused(
            jail,
            "WEBOOK_REQUEST_TIMEOUT",
            "99999999999999d",
            &["request_timeout", "WEBOOK_REQUEST_TIMEOUT", "at most 1h"],
        );
        refused(
            jail,
            "WEBOOK_HTTP_IDLE_TIMEOUT",
            "2d",
            &["http_idle_timeout", "at most 1d"],
        );
        refused(
            jail,
            "WEBOOK_SHUTDOWN_TIMEOUT",
            "2h",
            &["shutdown_timeout", "at most 1h"],
        );
        refused(
            jail,
            "WEBOOK_TRUSTED_PROXIES",
            "10.0.0.1, 0.0.0.0/0",
            &["trusted_proxies", "0.0.0.0/0", "every address"],
        );
        refused(
            jail,
            "WEBOOK_TRUSTED_PROXIES",
            "::/0",
            &["trusted_proxies", "::/0"],
        );
        jail.set_env(
            "WEBOOK_JWT_ACCESS_SECRET",
            "one-secret-for-both-0123456789abcdef",
        );
        refused(
            jail,
            "WEBOOK_JWT_REFRESH_SECRET",
            "one-secret-for-both-0123456789abcdef",
            &["jwt_refresh_secret", "jwt_access_secret", "different"],
        );
        std::env::remove_var("WEBOOK_JWT_ACCESS_SECRET");
        refused(
            jail,
            "WEBOOK_METRICS_ALLOWED_NETWORKS",
            "10.0.0.0/33",
            &["metrics_allowed_networks", "CIDR"],
        );
        refused(
            jail,
            "WEBOOK_METRICS_TOKEN",
            "short",
            &["metrics_token", "16 bytes"],
        );
        // Values that would make a consumer or a job fail on every try (issue 44).
        refused(
            jail,
            "WEBOOK_REWARD_SHARE_BPS",
            "10000",
            &["reward_share_bps", "WEBOOK_REWARD_SHARE_BPS", "1 fen"],
        );
        refused(
            jail,
            "WEBOOK_JOB_POLL_MAX",
            "4ms",
            &["job_poll_max", "WEBOOK_JOB_POLL_MAX", "5ms"],
        );
        refused(
            jail,
            "WEBOOK_JOB_PERMITS",
            &(tokio::sync::Semaphore::MAX_PERMITS + 1).to_string(),
            &["job_permits", "WEBOOK_JOB_PERMITS"],
        );
        jail.set_env("WEBOOK_JOB_HEARTBEAT", "300us");
        refused(
            jail,
            "WEBOOK_JOB_LEASE",
            "900us",
            &["job_lease", "WEBOOK_JOB_LEASE", "1ms"],
        );
        std::env::remove_var("WEBOOK_JOB_HEARTBEAT");
        refused(
            jail,
            "WEBOOK_REFRESH_TOKEN_TTL",
            "101years",
            &["refresh_token_ttl", "WEBOOK_REFRESH_TOKEN_TTL", "100 years"],
        );
        refused(
            jail,
            "WEBOOK_REFRESH_RETRY_WINDOW",
            "6m",
            &["refresh_retry_window", "WEBOOK_REFRESH_RETRY_WINDOW", "5m"],
        );

        jail.create_file("webook.toml", "listen = \"127.0.0.1:1\"\nlog = \n")?;
        let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
        assert!(!err.contains('\n'), "one line: {err}");
        assert!(
            err.contains("webook.toml") && err.contains("line 2"),
            "{err}"
        );
        Ok(())
    });
}

#[test]
fn bad_values_name_the_setting() {
    Jail::expect_with(|jail| {
        jail.set_env("WEBOOK_DATABASE_URL", "mysql://root@localhost/webook");
        let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
        assert!(
            err.contains("database_url") && err.contains("WEBOOK_DATABASE_URL"),
            "{err}"
        );

        jail.set_env("WEBOOK_DATABASE_URL", "postgres://u:hunter2@[bad/db");
        let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
        assert!(err.contains("database_url"), "{err}");
        assert!(!err.contains("hunter2"), "password leaked: {err}");

        jail.set_env("WEBOOK_DATABASE_URL", "sqlite://ok.db");
        jail.set_env("WEBOOK_LISTEN", "not-an-address");
        let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
        assert!(err.contains("listen"), "{err}");

        jail.set_env("WEBOOK_LISTEN", "127.0.0.1:0");
        jail.set_env("WEBOOK_PURGE_SCHEDULE", "0 0 25 * * *");
        let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid purge_schedule (WEBOOK_PURGE_SCHEDULE): invalid cron expression \
                 \"0 0 25 * * *\": hour field \"25\": 25 is out of range 0-23"
        );

        jail.set_env("WEBOOK_PURGE_SCHEDULE", "@every 10m");
        jail.set_env("WEBOOK_ROLE", "api");
        let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
        assert!(
            err.contains("role") && err.contains("cluster mode"),
            "{err}"
        );
        jail.set_env("WEBOOK_ROLE", "worker");
        jail.set_env("WEBOOK_JOB_LEASE", "3s");
        jail.set_env("WEBOOK_JOB_HEARTBEAT", "2s");
        let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
        assert!(err.contains("job_lease"), "{err}");
        Ok(())
    });
}

#[test]
fn cluster_mode_requires_secrets() {
    Jail::expect_with(|jail| {
        jail.set_env("WEBOOK_REDIS_URL", "redis://127.0.0.1:6379/");
        let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
        assert!(
            err.contains("jwt_access_secret") && err.contains("cluster"),
            "{err}"
        );

        jail.set_env("WEBOOK_JWT_ACCESS_SECRET", "short");
        jail.set_env("WEBOOK_JWT_REFRESH_SECRET", "x".repeat(40));
        let err = load_config(&ConfigArgs::default()).unwrap_err().to_string();
        assert!(err.contains("too short"), "{err}");

        jail.set_env("WEBOOK_JWT_ACCESS_SECRET", "y".repeat(40));
        let config = load_in_jail(&ConfigArgs::default())?;
        assert!(config.is_cluster());
        Ok(())
    });
}

#[test]
fn redacted_config_hides_secrets_and_passwords() {
    Jail::expect_with(|jail| {
        jail.set_env("WEBOOK_REDIS_URL", "redis://:redispass@127.0.0.1:6379/");
        jail.set_env(
            "WEBOOK_DATABASE_URL",
            "postgres://u:dbpass@127.0.0.1/webook",
        );
        jail.set_env("WEBOOK_JWT_ACCESS_SECRET", "a".repeat(40));
        jail.set_env("WEBOOK_JWT_REFRESH_SECRET", "r".repeat(40));
        jail.set_env("WEBOOK_WECHAT_APP_ID", "wx0123456789abcdef");
        jail.set_env("WEBOOK_WECHAT_APP_SECRET", "wechat-app-secret-value");
        jail.set_env(
            "WEBOOK_WECHAT_REDIRECT_URI",
            "https://example.com/oauth2/wechat/callback",
        );
        jail.set_env(
            "WEBOOK_OTLP_ENDPOINT",
            "https://tenant:collectorkey@otel.example.com",
        );
        let shown = load_in_jail(&ConfigArgs::default())?
            .to_redacted_toml()
            .map_err(|err| err.to_string())?;
        for leaked in [
            "redispass",
            "dbpass",
            &"a".repeat(40),
            &"r".repeat(40),
            "wechat-app-secret-value",
            "collectorkey",
        ] {
            assert!(!shown.contains(leaked), "{leaked} leaked:\n{shown}");
        }
        assert!(shown.contains("<redacted>"), "{shown}");
        assert!(
            shown.contains("postgres://u:***@127.0.0.1/webook"),
            "{shown}"
        );
        Ok(())
    });
}
