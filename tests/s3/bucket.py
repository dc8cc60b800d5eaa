"""Makes the bucket the S3 replication tests use on the endpoint that
AWS_ENDPOINT_URL names (moto's server, started by .ci/run), and checks
that the endpoint honours conditional writes (If-None-Match: * and
If-Match), which fencing a second writer relies on: it exits non-zero if
it does not, saying so."""

import os
import sys

import boto3
import botocore

bucket = sys.argv[1]
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
s3.create_bucket(Bucket=bucket)

key = "conditional-write-check"
first = s3.put_object(Bucket=bucket, Key=key, Body=b"1", IfNoneMatch="*")
for name, condition in (("If-None-Match: *", {"IfNoneMatch": "*"}), ("If-Match (stale)", {"IfMatch": '"0"'})):
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=b"2", **condition)
    except botocore.exceptions.ClientError as e:
        if e.response["Error"]["Code"] != "PreconditionFailed":
            raise
    else:
        sys.exit(f"the S3 endpoint ignores {name}: a write it should refuse succeeded")
s3.put_object(Bucket=bucket, Key=key, Body=b"3", IfMatch=first["ETag"])
s3.delete_object(Bucket=bucket, Key=key)
print(f"bucket {bucket} ready; the endpoint honours conditional writes")
