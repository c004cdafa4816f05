/**
 * Blob store on S3-compatible object storage through the AWS SDK (S3_URL, S3_BUCKET, S3_ACCESS_KEY, S3_SECRET_KEY,
 * S3_REGION). Path-style addressing (MinIO, Ceph, s3rver and AWS all accept it). Bodies are streamed with their
 * length; checksums only where the service requires them (several S3-compatible servers refuse aws-chunked bodies).
 */
import {
	CreateBucketCommand,
	DeleteObjectCommand,
	GetObjectCommand,
	HeadBucketCommand,
	HeadObjectCommand,
	ListObjectsV2Command,
	PutObjectCommand,
	S3Client,
} from "@aws-sdk/client-s3";
import type { Readable } from "stream";
import { checkKey, BLOB_KEY, type BlobInfo, type BlobStore } from "./types";

export interface S3Settings {
	url: string;
	bucket: string;
	accessKey?: string;
	secretKey?: string;
	region: string;
	/** Key prefix inside the bucket (several deployments or test runs in one bucket). */
	prefix?: string;
}

function status(err: unknown): number | undefined {
	return (err as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
}

export class S3BlobStore implements BlobStore {
	readonly kind = "s3" as const;
	private readonly client: S3Client;
	private readonly prefix: string;
	private ready?: Promise<void>;

	constructor(private readonly s: S3Settings) {
		this.prefix = s.prefix ?? "";
		this.client = new S3Client({
			endpoint: s.url,
			region: s.region,
			forcePathStyle: true,
			credentials: s.accessKey && s.secretKey ? { accessKeyId: s.accessKey, secretAccessKey: s.secretKey } : undefined,
			requestChecksumCalculation: "WHEN_REQUIRED",
			responseChecksumValidation: "WHEN_REQUIRED",
		});
	}

	/** The bucket, created on first use when it does not exist (a development convenience; production buckets exist). */
	private ensure(): Promise<void> {
		this.ready ??= (async () => {
			try {
				await this.client.send(new HeadBucketCommand({ Bucket: this.s.bucket }));
			} catch (err) {
				if (status(err) !== 404) throw err;
				await this.client.send(new CreateBucketCommand({ Bucket: this.s.bucket }));
			}
		})().catch((err) => {
			this.ready = undefined;
			throw err;
		});
		return this.ready;
	}

	private key(key: string): string {
		return this.prefix + checkKey(key);
	}

	async put(key: string, body: Readable, size: number): Promise<void> {
		await this.ensure();
		// A body that fails (client gone, limit exceeded) aborts the request: the object is never completed.
		const ac = new AbortController();
		const abort = (err: unknown) => ac.abort(err);
		body.once("error", abort);
		try {
			await this.client.send(new PutObjectCommand({ Bucket: this.s.bucket, Key: this.key(key), Body: body, ContentLength: size }), { abortSignal: ac.signal });
		} finally {
			body.off("error", abort);
		}
	}

	async get(key: string, range?: { start: number; end: number }): Promise<Readable | null> {
		await this.ensure();
		try {
			const r = await this.client.send(new GetObjectCommand({ Bucket: this.s.bucket, Key: this.key(key), ...(range ? { Range: `bytes=${range.start}-${range.end}` } : {}) }));
			return r.Body as Readable;
		} catch (err) {
			if (status(err) === 404) return null;
			throw err;
		}
	}

	async stat(key: string): Promise<BlobInfo | null> {
		await this.ensure();
		try {
			const r = await this.client.send(new HeadObjectCommand({ Bucket: this.s.bucket, Key: this.key(key) }));
			return { key, size: Number(r.ContentLength ?? 0), modified: r.LastModified ? r.LastModified.getTime() : 0 };
		} catch (err) {
			if (status(err) === 404) return null;
			throw err;
		}
	}

	async remove(key: string): Promise<void> {
		await this.ensure();
		try {
			await this.client.send(new DeleteObjectCommand({ Bucket: this.s.bucket, Key: this.key(key) }));
		} catch (err) {
			if (status(err) !== 404) throw err;
		}
	}

	async *list(): AsyncIterable<BlobInfo> {
		await this.ensure();
		let token: string | undefined;
		do {
			const r = await this.client.send(new ListObjectsV2Command({ Bucket: this.s.bucket, Prefix: this.prefix || undefined, ContinuationToken: token, MaxKeys: 1000 }));
			for (const o of r.Contents ?? []) {
				const key = (o.Key ?? "").slice(this.prefix.length);
				if (BLOB_KEY.test(key)) yield { key, size: Number(o.Size ?? 0), modified: o.LastModified ? o.LastModified.getTime() : 0 };
			}
			token = r.IsTruncated ? r.NextContinuationToken : undefined;
		} while (token);
	}

	async ping(): Promise<boolean> {
		try {
			this.ready = undefined;
			await this.ensure();
			return true;
		} catch {
			return false;
		}
	}

	async close(): Promise<void> {
		this.client.destroy();
	}
}
