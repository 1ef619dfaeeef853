import datetime as dt

import pytest

from reconstructor import settings as config
from reconstructor.errors import UsageError


def test_flags_win_over_env_which_wins_over_the_file(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('topic_pattern = "file-.*"\noutput = "/file"\ntrigger = "1 minute"\n'
                 '[kafka]\n"security.protocol" = "SASL_SSL"\n[s3]\nendpoint = "http://x"\n')
    cfg = config.load(str(f), env={"RECON_OUTPUT": "/env", "RECON_TRIGGER": "5 minutes"},
                      flags={"trigger": "available-now"})
    assert cfg.topic_pattern == "file-.*"
    assert cfg.output == "/env"
    assert cfg.trigger == "available-now"
    assert cfg.kafka == {"security.protocol": "SASL_SSL"}
    assert cfg.s3.endpoint == "http://x"


def test_secrets_never_appear_in_the_printed_config(tmp_path):
    cfg = config.load(None, env={
        "RECON_KAFKA_SASL_JAAS_CONFIG": "org.apache.kafka...PlainLoginModule required password='hunter2';",
        "RECON_KAFKA_SSL_TRUSTSTORE_PASSWORD": "s3cr3t", "RECON_S3_SECRET_KEY": "abc123",
        "RECON_S3_ACCESS_KEY": "AKIA0000", "RECON_KAFKA_SASL_MECHANISM": "PLAIN"})
    text = cfg.to_toml()
    for secret in ("hunter2", "s3cr3t", "abc123", "AKIA0000"):
        assert secret not in text
    assert 'mechanism = "PLAIN"' in text or '"sasl.mechanism" = "PLAIN"' in text
    assert cfg.kafka["sasl.jaas.config"].endswith("password='hunter2';")  # still passed through


@pytest.mark.parametrize("content, message", [
    ("toppic_pattern = 'x'", "unknown setting 'toppic_pattern'"),
    ("max_offsets_per_trigger = 'many'", "must be a whole number"),
    ("[s3]\nendpoint = 1\nregoin = 'x'", "unknown setting s3.regoin"),
    ("not toml at all ===", "not valid TOML"),
])
def test_a_bad_config_file_is_a_usage_error_naming_the_problem(tmp_path, content, message):
    f = tmp_path / "bad.toml"
    f.write_text(content)
    with pytest.raises(UsageError, match=message):
        config.load(str(f), env={})


def test_micro_batches_are_capped_by_default_and_each_layer_can_move_the_cap(tmp_path):
    assert config.load(None, env={}).max_offsets_per_trigger == config.DEFAULT_MAX_OFFSETS_PER_TRIGGER
    f = tmp_path / "c.toml"
    f.write_text("max_offsets_per_trigger = 5000000\n")
    assert config.load(str(f), env={}).max_offsets_per_trigger == 5_000_000
    assert config.load(str(f), env={"RECON_MAX_OFFSETS_PER_TRIGGER": "1000"}).max_offsets_per_trigger == 1000
    assert config.load(str(f), env={}, flags={"max_offsets_per_trigger": 7}).max_offsets_per_trigger == 7
    with pytest.raises(UsageError, match="must be positive"):
        config.load(None, env={}, flags={"max_offsets_per_trigger": 0})



def test_the_jars_folder_is_a_setting_with_the_working_directorys_jars_as_default(tmp_path, monkeypatch):
    assert config.load(None, env={}).jars_dir is None
    monkeypatch.chdir(tmp_path)
    checkout = tmp_path / "checkout"
    assert config.default_jars_dir(checkout=checkout) == tmp_path / ".jars"  # no jars anywhere
    (checkout / ".jars" / "spark").mkdir(parents=True)
    (checkout / ".jars" / "spark" / "delta-spark.jar").write_bytes(b"")
    # From any folder, the jars `make jars` filled in the checkout the package is installed from...
    assert config.default_jars_dir(checkout=checkout) == checkout / ".jars"
    # ...unless the working directory has jars of its own.
    (tmp_path / ".jars" / "spark").mkdir(parents=True)
    (tmp_path / ".jars" / "spark" / "delta-spark.jar").write_bytes(b"")
    assert config.default_jars_dir(checkout=checkout) == tmp_path / ".jars"
    f = tmp_path / "c.toml"
    f.write_text('jars_dir = "/opt/recon/jars"\n')
    assert config.load(str(f), env={}).jars_dir == "/opt/recon/jars"
    assert config.load(str(f), env={"RECON_JARS_DIR": "/ci/jars"}).jars_dir == "/ci/jars"

# Real-world setting names: the value of each is a secret (True) or not (False).  A name that only
# contains the letters (keystore, keymanager, key.serializer) or that names where a secret lives,
# what kind it is or which class provides it (location, type, provider, file, url) is not a secret;
# a certificate chain or truststore certificates are public.
SETTING_NAMES = [
    ("kafka", "ssl.key.password", True),
    ("kafka", "ssl.keystore.key", True),
    ("kafka", "ssl.keystore.password", True),
    ("kafka", "ssl.truststore.password", True),
    ("kafka", "sasl.jaas.config", True),
    ("kafka", "sasl.oauthbearer.client.secret", True),
    ("kafka", "sasl.oauthbearer.client.credentials.client.secret", True),
    ("kafka", "ssl.keystore.certificate.chain", False),
    ("kafka", "ssl.truststore.certificates", False),
    ("kafka", "ssl.keystore.location", False),
    ("kafka", "ssl.keystore.type", False),
    ("kafka", "ssl.truststore.location", False),
    ("kafka", "ssl.keymanager.algorithm", False),
    ("kafka", "ssl.endpoint.identification.algorithm", False),
    ("kafka", "key.serializer", False),
    ("kafka", "key.deserializer", False),
    ("kafka", "sasl.mechanism", False),
    ("kafka", "security.protocol", False),
    ("kafka", "sasl.kerberos.service.name", False),
    ("kafka", "sasl.login.callback.handler.class", False),
    ("kafka", "sasl.oauthbearer.token.endpoint.url", False),
    ("spark", "spark.hadoop.fs.s3a.secret.key", True),
    ("spark", "spark.hadoop.fs.s3a.access.key", True),
    ("spark", "spark.hadoop.fs.s3a.session.token", True),
    ("spark", "spark.hadoop.fs.s3a.encryption.key", True),
    ("spark", "spark.hadoop.fs.s3a.server-side-encryption.key", True),
    ("spark", "spark.hadoop.fs.s3a.bucket.recon.secret.key", True),
    ("spark", "spark.hadoop.fs.azure.account.key.myacct.dfs.core.windows.net", True),
    ("spark", "fs.azure.account.key.myacct.blob.core.windows.net", True),
    ("spark", "spark.hadoop.fs.azure.account.oauth2.client.secret", True),
    ("spark", "spark.hadoop.fs.azure.sas.fixed.token", True),
    ("spark", "spark.ssl.keyPassword", True),
    ("spark", "spark.ssl.keyStorePassword", True),
    ("spark", "spark.authenticate.secret", True),
    ("spark", "spark.databricks.token", True),
    ("spark", "spark.hadoop.fs.s3a.aws.credentials.provider", False),
    ("spark", "spark.hadoop.fs.s3a.encryption.algorithm", False),
    ("spark", "spark.hadoop.fs.azure.account.oauth2.client.id", False),
    ("spark", "spark.hadoop.fs.azure.account.keyprovider.myacct.dfs.core.windows.net", False),
    ("spark", "spark.ssl.keyStore", False),
    ("spark", "spark.authenticate.secret.file", False),
    ("spark", "spark.network.crypto.keyLength", False),
    ("spark", "spark.sql.shuffle.partitions", False),
    ("spark", "spark.hadoop.fs.s3a.endpoint", False),
    ("s3", "access_key", True),
    ("s3", "secret_key", True),
    ("s3", "endpoint", False),
    ("s3", "region", False),
]


@pytest.mark.parametrize("table, name, secret", SETTING_NAMES)
def test_config_show_redacts_exactly_the_settings_whose_value_is_a_secret(tmp_path, table, name, secret):
    value = "VALUE-1b9e7c"
    f = tmp_path / "c.toml"
    f.write_text(f'[{table}]\n"{name}" = "{value}"\n')
    cfg = config.load(str(f), env={})
    text = cfg.to_toml()
    assert (value not in text) == secret, text
    assert (config.REDACTED in text) == secret, text
    assert config.is_secret(name) == secret


def test_config_show_redacts_the_secret_system_properties_inside_a_value(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[spark]\n"
                 "\"spark.driver.extraJavaOptions\" = \"-Xss8m -Djavax.net.ssl.keyStorePassword=ks-1b9e "
                 "-Dapp.db.password='pw 2c7f' -Djavax.net.ssl.keyStore=/etc/ks.jks -Dapp.secret=\\\"sc 3d1a\\\"\"\n"
                 "\"spark.executor.extraJavaOptions\" = \"-Dapi.token=tk-4e8b -Dapp.mode=fast\"\n")
    cfg = config.load(str(f), env={})
    text = cfg.to_toml()
    for secret in ("ks-1b9e", "pw 2c7f", "sc 3d1a", "tk-4e8b"):
        assert secret not in text, text
    shown = cfg.redacted()["spark"]
    assert shown["spark.driver.extraJavaOptions"] == (
        "-Xss8m -Djavax.net.ssl.keyStorePassword=*** -Dapp.db.password=*** "
        "-Djavax.net.ssl.keyStore=/etc/ks.jks -Dapp.secret=***")
    assert shown["spark.executor.extraJavaOptions"] == "-Dapi.token=*** -Dapp.mode=fast"
    assert config.redact("'-Dapp.password=a b' x-Dtoken=1", "spark.opts") == "'-Dapp.password=***' x-Dtoken=1"
    assert "-Dapp.db.password='pw 2c7f'" in cfg.spark["spark.driver.extraJavaOptions"]  # still passed through


def test_no_scalar_setting_is_redacted():
    text = config.Settings(output="/out", topic_pattern="sensor-.*", bootstrap_servers="h:1").to_toml()
    assert config.REDACTED not in text


def test_durations_are_read_once_into_timedeltas_and_shown_as_written(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('session_timeout = "90 seconds"\nstate_retention = "2d"\n')
    cfg = config.load(str(f), env={"RECON_COMPACT_GRACE": "0 seconds"},
                      flags={"trigger": "1.5 min", "vacuum_retention": "200 hours"})
    assert cfg.session_timeout == dt.timedelta(seconds=90)
    assert cfg.state_retention == dt.timedelta(days=2)
    assert cfg.compact_grace == dt.timedelta(0)
    assert cfg.trigger == dt.timedelta(seconds=90)
    assert cfg.vacuum_retention == dt.timedelta(hours=200)
    assert cfg.compact_every == dt.timedelta(hours=1)  # the default
    text = cfg.to_toml()
    for line in ('session_timeout = "90 seconds"', 'state_retention = "2d"', 'trigger = "1.5 min"',
                 'compact_grace = "0 seconds"', 'vacuum_retention = "200 hours"', 'compact_every = "1 hour"'):
        assert line in text, text
    # What config show prints loads back to the same configuration.
    f.write_text(text)
    assert config.load(str(f), env={}) == cfg


def test_named_triggers_stay_names_and_compaction_can_be_turned_off():
    cfg = config.load(None, env={"RECON_COMPACT_EVERY": "off"}, flags={"trigger": "once"})
    assert cfg.trigger == "once" and cfg.compact_every is None
    assert 'compact_every = "off"' in cfg.to_toml()
    assert config.load(None, env={}).trigger == "available-now"


@pytest.mark.parametrize("setting, value, message", [
    ("session_timeout", "soon", "--session-timeout: not a duration: 'soon'"),
    ("state_retention", "7 weeks", "--state-retention: not a duration: '7 weeks'"),
    ("trigger", "sometimes", "--trigger: not a duration: 'sometimes'"),
    ("compact_every", "never", "--compact-every: not a duration: 'never'"),
    ("compact_grace", "-1 minute", "--grace: not a duration: '-1 minute'"),
    ("vacuum_retention", "0 hours", "--vacuum-retention '0 hours' must be longer than zero"),
    ("session_timeout", "0s", "--session-timeout '0s' must be longer than zero"),
])
def test_a_bad_duration_is_a_usage_error_naming_its_flag(setting, value, message):
    with pytest.raises(UsageError, match=message):
        config.load(None, env={}, flags={setting: value})


@pytest.mark.parametrize("text, value", [
    ("500ms", dt.timedelta(milliseconds=500)), ("500 ms", dt.timedelta(milliseconds=500)),
    ("2 milliseconds", dt.timedelta(milliseconds=2)), ("30s", dt.timedelta(seconds=30)),
    ("3 mins", dt.timedelta(minutes=3)), ("10m", dt.timedelta(minutes=10)), ("2 hours", dt.timedelta(hours=2)),
])
def test_a_duration_reads_its_unit_as_written(text, value):
    assert config.Duration(text) == value
