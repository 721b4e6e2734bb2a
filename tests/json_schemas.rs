//! Machine output is a contract: every command's `--json` names its schema
//! (`"schema": "outbox-check/<command>/v1"`), and what it prints validates against the JSON
//! Schema of that name under docs/json/ (trace's: docs/trace-verdict.schema.json, tested in
//! tests/oracle.rs).

use std::path::Path;
use std::process::Command;

fn validate(schema_name: &str, args: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join(format!("docs/json/{schema_name}.schema.json"))).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let out = Command::new(env!("CARGO_BIN_EXE_outbox-check"))
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .args(args)
        .current_dir(root)
        .output()
        .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let value: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON: {e}"));
    assert_eq!(value["schema"], format!("outbox-check/{schema_name}/v1"), "{args:?}");
    let errors: Vec<String> = validator.iter_errors(&value).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{args:?}: {errors:?}");
}

#[test]
fn every_json_output_names_its_schema_and_matches_it() {
    validate("check", &["check", "--variant", "seed-v2", "--json", "--quiet", "--no-liveness"]);
    validate("check", &["check", "--fleet", "seed-v2,legacy-v1", "--json", "--quiet"]);
    validate("check", &["check", "--variant", "seed-v2", "--shard", "1/2", "--json", "--quiet"]);
    validate("sim-run", &["sim", "--variant", "legacy-v1", "--seed", "5", "--json", "--quiet", "--no-write"]);
    validate("sim-sweep", &["sim", "--variant", "seed-v2", "--seeds", "20", "--json", "--quiet", "--no-write"]);
    validate("conform", &["conform", "--store", "sqlite", "--variant", "seed-v2", "--cases", "10", "--json"]);
    validate(
        "conform",
        &[
            "conform",
            "--store",
            "sqlite",
            "--variant",
            "write-id-only",
            "--against",
            "reference",
            "--cases",
            "50",
            "--json",
        ],
    );
    validate(
        "conform",
        &[
            "conform",
            "--store",
            "sqlite",
            "--profile",
            "docs/examples/jobs/jobs.profile.toml",
            "--cases",
            "20",
            "--json",
        ],
    );
    validate("replay", &["replay", "reports/counterexamples/seed-v2-x2-m2/S3.json", "--json"]);
    validate("variants", &["variants", "--json"]);
    validate("variants", &["variants", "legacy-v1", "--json"]);
    validate("mutants", &["mutants", "--json", "--quiet"]);
    validate("verify", &["verify", "--json", "--quiet", "--sim-seeds", "20", "--messages", "1"]);
}

/// The verdicts `verify --report reports` commits beside the matrix follow the same schema.
#[test]
fn the_committed_verdicts_match_the_verify_schema() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(root.join(p)).unwrap()).unwrap()
    };
    let validator = jsonschema::validator_for(&read("docs/json/verify.schema.json")).unwrap();
    let verdicts = read("reports/verdicts.json");
    let errors: Vec<String> =
        validator.iter_errors(&verdicts).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{errors:?}");
}

/// The explorer's API answers in its schema, before the background check and after.
#[test]
fn the_explorer_state_matches_its_schema() {
    use outbox_check::design::{Design, Variant};
    use outbox_check::world::WorldConfig;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("docs/json/explore-state.schema.json")).unwrap())
            .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let config = WorldConfig::small(Design::Variant(Variant::LegacyV1), 2, 1);
    let explorer = outbox_check_models::explorer::Explorer::new(config.clone());
    let options = outbox_check_models::check::CheckOptions { threads: 1, ..Default::default() };
    for checked in [false, true] {
        if checked {
            let _ = explorer.checked.set(outbox_check_models::check::check(&config, &options, &|_, _| {}));
        }
        let report = explorer.checked.get();
        let lasso =
            report.and_then(|r| r.properties.iter().find(|p| p.id == "L2")).and_then(|p| p.explorer_path.clone());
        for path in ["0", "0/0/0/1"].into_iter().map(String::from).chain(lasso) {
            let view = explorer.view(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(view["schema"], "outbox-check/explore-state/v1");
            assert_eq!(view["checking"], !checked);
            let errors: Vec<String> =
                validator.iter_errors(&view).map(|e| format!("{e} at {}", e.instance_path())).collect();
            assert!(errors.is_empty(), "{path}: {errors:?}");
        }
    }
}

/// Every `faults` object of a JSON Schema under docs/json/ lists exactly the catalogue's faults,
/// each required: the schemas follow the catalogue (outbox_check::world::fault).
#[test]
fn the_schemas_list_every_fault_of_the_catalogue() {
    fn faults_objects<'a>(value: &'a serde_json::Value, found: &mut Vec<&'a serde_json::Value>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, inner) in map {
                    if key == "faults" && inner.get("properties").is_some() {
                        found.push(inner);
                    }
                    faults_objects(inner, found);
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|i| faults_objects(i, found)),
            _ => {}
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut expected: Vec<String> =
        outbox_check::world::fault::FAULTS.iter().map(|entry| entry.field.to_string()).collect();
    expected.sort();
    let mut checked = 0;
    for entry in std::fs::read_dir(root.join("docs/json")).unwrap() {
        let path = entry.unwrap().path();
        let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let mut found = Vec::new();
        faults_objects(&schema, &mut found);
        for faults in found {
            let mut listed: Vec<String> = faults["properties"].as_object().unwrap().keys().cloned().collect();
            listed.sort();
            assert_eq!(listed, expected, "{}: the faults' properties", path.display());
            let mut required: Vec<String> =
                faults["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
            required.sort();
            assert_eq!(required, expected, "{}: the faults' required list", path.display());
            checked += 1;
        }
    }
    assert!(checked >= 1, "no schema has a faults object");
}
