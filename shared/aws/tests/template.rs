//! The resources `siesta bootstrap` creates ([`Plan::declared`]) are the ones the
//! CloudFormation templates declare: infra/template.yaml and the one `siesta new` writes
//! into an app. Only the compared properties are read; intrinsic functions (`!Ref`,
//! `!Sub`, `!GetAtt`, `!If`) are opaque tagged values, looked at only where a setting
//! depends on one.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use serde_json::json;
use serde_norway::Value;
use siesta_aws::bootstrap::{
    BucketSpec, IndexSpec, Plan, PublicAccessBlockSpec, QueueSpec, TableSpec,
};

const TEMPLATES: [(&str, &str); 2] = [
    (
        "infra/template.yaml",
        include_str!("../../../infra/template.yaml"),
    ),
    (
        "cli/templates/new/infra/template.yaml",
        include_str!("../../../cli/templates/new/infra/template.yaml"),
    ),
];

fn parse(text: &str) -> Value {
    // The app template's placeholder, filled in as `siesta new` fills it.
    serde_norway::from_str(&text.replace("{{name}}", "app")).expect("a YAML template")
}

/// The properties of resource `id`, which must be of type `kind`.
fn properties<'a>(t: &'a Value, id: &str, kind: &str) -> &'a Value {
    let resource = &t["Resources"][id];
    assert_eq!(resource["Type"].as_str(), Some(kind), "{id}");
    &resource["Properties"]
}

/// A scalar as text (`900`, `true`, `S`); `None` for anything else or absent.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn flag(v: &Value) -> bool {
    text(v).as_deref() == Some("true")
}

/// An intrinsic function written with its short tag (`!If [..]`): (name, argument).
fn tagged(v: &Value) -> Option<(String, &Value)> {
    match v {
        Value::Tagged(t) => Some((
            t.tag.to_string().trim_start_matches('!').to_owned(),
            &t.value,
        )),
        _ => None,
    }
}

fn pairs(list: &Value, a: &str, b: &str) -> Vec<(String, String)> {
    list.as_sequence()
        .into_iter()
        .flatten()
        .map(|i| (text(&i[a]).unwrap(), text(&i[b]).unwrap()))
        .collect()
}

/// `DeletionProtectionEnabled: !If [ProtectRunsTable, true, false]`, where the
/// condition compares the `DeletionProtection` parameter with "true": protected when
/// the parameter's default is "true".
fn deletion_protection(t: &Value, props: &Value) -> bool {
    let (f, arg) = tagged(&props["DeletionProtectionEnabled"]).expect("an !If");
    assert_eq!(f, "If");
    let args = arg.as_sequence().expect("!If [condition, then, else]");
    assert_eq!(args.len(), 3);
    let condition = args[0].as_str().unwrap();
    assert_eq!((flag(&args[1]), flag(&args[2])), (true, false));
    let (f, arg) = tagged(&t["Conditions"][condition]).expect("an !Equals");
    assert_eq!(f, "Equals");
    let (f, parameter) = tagged(&arg[0]).expect("a !Ref to the parameter");
    assert_eq!(f, "Ref");
    let default = &t["Parameters"][parameter.as_str().unwrap()]["Default"];
    text(default) == text(&arg[1])
}

fn table(t: &Value) -> TableSpec {
    let p = properties(t, "RunsTable", "AWS::DynamoDB::Table");
    assert_eq!(p["BillingMode"].as_str(), Some("PAY_PER_REQUEST"));
    let mut indexes: Vec<IndexSpec> = p["GlobalSecondaryIndexes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|g| IndexSpec {
            name: text(&g["IndexName"]).unwrap(),
            keys: pairs(&g["KeySchema"], "AttributeName", "KeyType"),
            projection: text(&g["Projection"]["ProjectionType"]).unwrap_or_else(|| "ALL".into()),
            non_key_attributes: g["Projection"]["NonKeyAttributes"]
                .as_sequence()
                .into_iter()
                .flatten()
                .filter_map(text)
                .collect(),
        })
        .collect();
    indexes.sort_by(|a, b| a.name.cmp(&b.name));
    let ttl = &p["TimeToLiveSpecification"];
    TableSpec {
        attributes: sorted(pairs(
            &p["AttributeDefinitions"],
            "AttributeName",
            "AttributeType",
        )),
        keys: pairs(&p["KeySchema"], "AttributeName", "KeyType"),
        indexes,
        ttl_attribute: flag(&ttl["Enabled"])
            .then(|| text(&ttl["AttributeName"]))
            .flatten(),
        point_in_time_recovery: flag(
            &p["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"],
        ),
        sse_enabled: flag(&p["SSESpecification"]["SSEEnabled"]),
        deletion_protection: deletion_protection(t, p),
    }
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// A policy document as JSON: `!GetAtt X.Arn` as `${X.Arn}`, `!Sub "…"` as its text.
fn policy_json(v: &Value) -> serde_json::Value {
    if let Some((f, arg)) = tagged(v) {
        return match f.as_str() {
            "GetAtt" => json!(format!("${{{}}}", arg.as_str().unwrap())),
            "Sub" => json!(arg.as_str().unwrap()),
            other => panic!("!{other} in the bucket policy"),
        };
    }
    match v {
        Value::Mapping(m) => serde_json::Value::Object(
            m.iter()
                .map(|(k, v)| (k.as_str().unwrap().to_owned(), policy_json(v)))
                .collect(),
        ),
        Value::Sequence(items) => serde_json::Value::Array(items.iter().map(policy_json).collect()),
        scalar => serde_json::to_value(scalar).unwrap(),
    }
}

fn bucket(t: &Value) -> (BucketSpec, serde_json::Value) {
    let p = properties(t, "ArtifactsBucket", "AWS::S3::Bucket");
    let rules = p["LifecycleConfiguration"]["Rules"].as_sequence().unwrap();
    let days = |f: &dyn Fn(&Value) -> &Value| {
        rules
            .iter()
            .find_map(|r| text(f(r)))
            .map(|d| d.parse::<i32>().unwrap())
    };
    let block = &p["PublicAccessBlockConfiguration"];
    let policy = properties(t, "ArtifactsBucketPolicy", "AWS::S3::BucketPolicy");
    let (f, on) = tagged(&policy["Bucket"]).unwrap();
    assert_eq!((f.as_str(), on.as_str()), ("Ref", Some("ArtifactsBucket")));
    let spec = BucketSpec {
        sse_algorithm: text(
            &p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
                ["SSEAlgorithm"],
        ),
        expiration_days: days(&|r| &r["ExpirationInDays"]),
        abort_incomplete_upload_days: days(
            &|r| &r["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"],
        ),
        public_access_block: Some(PublicAccessBlockSpec {
            block_public_acls: flag(&block["BlockPublicAcls"]),
            block_public_policy: flag(&block["BlockPublicPolicy"]),
            ignore_public_acls: flag(&block["IgnorePublicAcls"]),
            restrict_public_buckets: flag(&block["RestrictPublicBuckets"]),
        }),
        object_ownership: text(&p["OwnershipControls"]["Rules"][0]["ObjectOwnership"]),
        policy: None,
    };
    (spec, policy_json(&policy["PolicyDocument"]))
}

fn queue(t: &Value, id: &str) -> QueueSpec {
    let p = properties(t, id, "AWS::SQS::Queue");
    QueueSpec {
        attributes: [
            "VisibilityTimeout",
            "MessageRetentionPeriod",
            "SqsManagedSseEnabled",
        ]
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), text(&p[name])?)))
        .collect(),
        max_receive_count: text(&p["RedrivePolicy"]["maxReceiveCount"]).map(|n| n.parse().unwrap()),
    }
}

#[test]
fn the_templates_declare_the_table_bootstrap_creates() {
    let mut declared = Plan::declared().table;
    declared.attributes.sort();
    declared.indexes.sort_by(|a, b| a.name.cmp(&b.name));
    for (path, text) in TEMPLATES {
        assert_eq!(table(&parse(text)), declared, "{path}");
    }
}

#[test]
fn the_templates_declare_the_bucket_bootstrap_creates() {
    let declared = Plan::declared().bucket;
    let declared_policy: serde_json::Value =
        serde_json::from_str(declared.policy.as_deref().unwrap()).unwrap();
    for (path, text) in TEMPLATES {
        let (spec, policy) = bucket(&parse(text));
        assert_eq!(
            spec,
            BucketSpec {
                policy: None,
                ..declared.clone()
            },
            "{path}"
        );
        assert_eq!(policy, declared_policy, "{path}: the bucket policy");
    }
}

#[test]
fn the_templates_declare_the_queues_bootstrap_creates() {
    let plan = Plan::declared();
    for (path, text) in TEMPLATES {
        let t = parse(text);
        assert_eq!(queue(&t, "WakeUpQueue"), plan.queue, "{path}");
        assert_eq!(
            queue(&t, "WakeUpDeadLetterQueue"),
            plan.dead_letter_queue,
            "{path}"
        );
        let (f, target) = tagged(
            &t["Resources"]["WakeUpQueue"]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"],
        )
        .unwrap();
        assert_eq!(
            (f.as_str(), target.as_str()),
            ("GetAtt", Some("WakeUpDeadLetterQueue.Arn")),
            "{path}: the redrive target"
        );
    }
}

#[test]
fn a_template_that_drifts_from_the_description_is_caught() {
    let drifted = TEMPLATES[0]
        .1
        .replace("VisibilityTimeout: 900", "VisibilityTimeout: 60")
        .replace("ProjectionType: INCLUDE", "ProjectionType: ALL");
    let t = parse(&drifted);
    assert_ne!(queue(&t, "WakeUpQueue"), Plan::declared().queue);
    let due = table(&t)
        .indexes
        .into_iter()
        .find(|i| i.name == "due")
        .unwrap();
    assert_eq!(due.projection, "ALL");
}
