"""What a user deploys (DynamoDB table, IAM policy, S3 lifecycle rules) and the embedded local stack."""
