import pytest

from reconstructor import config
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
