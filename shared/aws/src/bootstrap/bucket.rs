//! The artifacts bucket: created, then given its encryption, public access block,
//! ownership rule, TLS-only policy and lifecycle rules (every run: they replace what the
//! bucket had).

use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, BucketLocationConstraint, CreateBucketConfiguration,
    ExpirationStatus, LifecycleExpiration, LifecycleRule, LifecycleRuleFilter, ObjectOwnership,
    OwnershipControls, OwnershipControlsRule, PublicAccessBlockConfiguration, ServerSideEncryption,
    ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
};

use super::{BootstrapError, Plan, declaration_error};
use crate::error::code;

/// The partition of a region (`aws`, `aws-cn`, `aws-us-gov`).
fn partition(region: Option<&str>) -> &'static str {
    match region {
        Some(r) if r.starts_with("cn-") => "aws-cn",
        Some(r) if r.starts_with("us-gov-") => "aws-us-gov",
        _ => "aws",
    }
}

impl Plan {
    /// Create the bucket with default encryption, the public access block, the object
    /// ownership rule, the bucket policy and the lifecycle expiry.
    pub async fn create_bucket(
        &self,
        client: &aws_sdk_s3::Client,
        name: &str,
        sdk: &aws_config::SdkConfig,
    ) -> Result<(), BootstrapError> {
        let aws = |e: String| BootstrapError::Aws {
            resource: format!("bucket {name}"),
            message: e,
        };
        let region = sdk.region().map(|r| r.as_ref().to_owned());
        let mut request = client.create_bucket().bucket(name);
        // us-east-1 takes no location constraint; every other region needs one.
        if let Some(region) = region.as_deref()
            && region != "us-east-1"
        {
            request = request.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(region))
                    .build(),
            );
        }
        match request.send().await {
            Ok(_) => {}
            Err(e) if code(&e) == Some("BucketAlreadyOwnedByYou") => {}
            Err(e) => return Err(aws(crate::error::sdk("CreateBucket", e).to_string())),
        }
        if let Some(algorithm) = &self.bucket.sse_algorithm {
            let rule = ServerSideEncryptionRule::builder()
                .apply_server_side_encryption_by_default(
                    ServerSideEncryptionByDefault::builder()
                        .sse_algorithm(ServerSideEncryption::from(algorithm.as_str()))
                        .build()
                        .map_err(|e| aws(e.to_string()))?,
                )
                .build();
            client
                .put_bucket_encryption()
                .bucket(name)
                .server_side_encryption_configuration(
                    ServerSideEncryptionConfiguration::builder()
                        .rules(rule)
                        .build()
                        .map_err(|e| aws(e.to_string()))?,
                )
                .send()
                .await
                .map_err(|e| aws(crate::error::sdk("PutBucketEncryption", e).to_string()))?;
        }
        if let Some(block) = self.bucket.public_access_block {
            client
                .put_public_access_block()
                .bucket(name)
                .public_access_block_configuration(
                    PublicAccessBlockConfiguration::builder()
                        .block_public_acls(block.block_public_acls)
                        .block_public_policy(block.block_public_policy)
                        .ignore_public_acls(block.ignore_public_acls)
                        .restrict_public_buckets(block.restrict_public_buckets)
                        .build(),
                )
                .send()
                .await
                .map_err(|e| aws(crate::error::sdk("PutPublicAccessBlock", e).to_string()))?;
        }
        if let Some(ownership) = &self.bucket.object_ownership {
            let rule = OwnershipControlsRule::builder()
                .object_ownership(ObjectOwnership::from(ownership.as_str()))
                .build()
                .map_err(|e| aws(e.to_string()))?;
            client
                .put_bucket_ownership_controls()
                .bucket(name)
                .ownership_controls(
                    OwnershipControls::builder()
                        .rules(rule)
                        .build()
                        .map_err(|e| aws(e.to_string()))?,
                )
                .send()
                .await
                .map_err(|e| aws(crate::error::sdk("PutBucketOwnershipControls", e).to_string()))?;
        }
        if let Some(policy) = &self.bucket.policy {
            let partition = partition(region.as_deref());
            let policy = policy
                .replace(
                    "${ArtifactsBucket.Arn}",
                    &format!("arn:{partition}:s3:::{name}"),
                )
                .replace("${ArtifactsBucket}", name)
                .replace("${AWS::Partition}", partition);
            if let Some(at) = policy.find("${") {
                let rest: String = policy[at..].chars().take(40).collect();
                return Err(declaration_error(format!(
                    "the bucket policy: cannot fill in {rest}…"
                )));
            }
            client
                .put_bucket_policy()
                .bucket(name)
                .policy(policy)
                .send()
                .await
                .map_err(|e| aws(crate::error::sdk("PutBucketPolicy", e).to_string()))?;
        }
        // The declared rules replace whatever the bucket had (an earlier release's
        // expiry by age, which would take a waiting run's values).
        let mut rules = Vec::new();
        if let Some(days) = self.bucket.expiration_days {
            rules.push(
                LifecycleRule::builder()
                    .id("expire-artifacts")
                    .status(ExpirationStatus::Enabled)
                    .filter(LifecycleRuleFilter::builder().prefix("").build())
                    .expiration(LifecycleExpiration::builder().days(days).build())
                    .build()
                    .map_err(|e| aws(e.to_string()))?,
            );
        }
        if let Some(days) = self.bucket.abort_incomplete_upload_days {
            rules.push(
                LifecycleRule::builder()
                    .id("abort-incomplete-uploads")
                    .status(ExpirationStatus::Enabled)
                    .filter(LifecycleRuleFilter::builder().prefix("").build())
                    .abort_incomplete_multipart_upload(
                        aws_sdk_s3::types::AbortIncompleteMultipartUpload::builder()
                            .days_after_initiation(days)
                            .build(),
                    )
                    .build()
                    .map_err(|e| aws(e.to_string()))?,
            );
        }
        if !rules.is_empty() {
            client
                .put_bucket_lifecycle_configuration()
                .bucket(name)
                .lifecycle_configuration(
                    BucketLifecycleConfiguration::builder()
                        .set_rules(Some(rules))
                        .build()
                        .map_err(|e| aws(e.to_string()))?,
                )
                .send()
                .await
                .map_err(|e| {
                    aws(crate::error::sdk("PutBucketLifecycleConfiguration", e).to_string())
                })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions() {
        assert_eq!(partition(Some("eu-west-1")), "aws");
        assert_eq!(partition(Some("cn-north-1")), "aws-cn");
        assert_eq!(partition(Some("us-gov-west-1")), "aws-us-gov");
        assert_eq!(partition(None), "aws");
    }
}
