from typing import Any

StackEnv = dict[str, str]


def test_put_list_and_get_an_object(stack_env: StackEnv, s3: Any, unique: str) -> None:
    bucket = stack_env["S3_BUCKET"]
    key = f"tests/{unique}/dt=2026-01-01/part-0.bin"
    body = bytes(range(256)) * 64
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    try:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"tests/{unique}/")
        assert [(o["Key"], o["Size"]) for o in listed["Contents"]] == [(key, len(body))]
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    finally:
        s3.delete_object(Bucket=bucket, Key=key)


def test_wrong_credentials_are_refused(stack_env: StackEnv, s3: Any) -> None:
    import boto3  # noqa: PLC0415
    from botocore.exceptions import ClientError  # noqa: PLC0415

    intruder = boto3.client(
        "s3",
        endpoint_url=stack_env["S3_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="nobody",
        aws_secret_access_key="wrong",
    )
    try:
        intruder.list_buckets()
    except ClientError as err:
        assert err.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    else:
        raise AssertionError("the S3 server accepted unknown credentials")
