/**
 * Files on S3-compatible storage (S3_URL, S3_BUCKET, S3_ACCESS_KEY, S3_SECRET_KEY) end to end, against s3rver run
 * in this process: upload, download with Range, share key, destroy removing the object, orphans collected.
 */
import { Readable } from "stream";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { startS3, type LocalS3 } from "../helpers/s3";
import { streamedUpload } from "../helpers/upload";
import { S3BlobStore } from "../../stores/blobs/s3";
import type { CleanerPass } from "../../workers/cleaner.worker";

jest.setTimeout(120_000);

let p: TestPlatform;
let s3: LocalS3;
let root: string;
let objects: S3BlobStore;
const MiB = 1024 * 1024;

beforeAll(async () => {
	s3 = await startS3("files-e2e");
	const settings = { url: s3.url, bucket: s3.bucket, accessKey: s3.accessKey, secretKey: s3.secretKey, region: "us-east-1" };
	p = await bootPlatform({ s3: settings });
	root = await p.rootToken();
	objects = new S3BlobStore(settings);
}, 60_000);
afterAll(async () => {
	await objects?.close();
	await p?.cleanup();
	await s3?.stop();
});

test("upload, download (whole, range, share key), destroy and orphan collection go through the S3 store", async () => {
	const up = await streamedUpload(`${p.url}/special/files/upload`, root, 3 * MiB + 5, { fill: 0x62 });
	expect(up.status).toBe(200);
	const f = up.body.items[0];
	expect(await objects.stat(f.id)).toMatchObject({ key: f.id, size: 3 * MiB + 5 });

	const whole = await fetch(`${p.url}/special/files/${f.id}/download`, { headers: { authorization: `Bearer ${root}` } });
	expect(whole.status).toBe(200);
	expect(whole.headers.get("content-length")).toBe(String(3 * MiB + 5));
	expect(whole.headers.get("etag")).toBe(`"${f.sha256}"`);
	expect((await whole.arrayBuffer()).byteLength).toBe(3 * MiB + 5);

	const part = await fetch(`${p.url}/special/files/${f.id}/download`, { headers: { authorization: `Bearer ${root}`, range: "bytes=10-19" } });
	expect(part.status).toBe(206);
	expect(part.headers.get("content-range")).toBe(`bytes 10-19/${3 * MiB + 5}`);
	expect(await part.text()).toBe("b".repeat(10));

	const share = await p.http("POST", `/special/files/${f.id}/share`, { token: root, body: { ttl: 60 } });
	const viaKey = await fetch(p.url + share.body.data.path, { headers: { range: "bytes=-3" } });
	expect([viaKey.status, await viaKey.text()]).toEqual([206, "bbb"]);

	expect((await p.http("DELETE", `/special/files/${f.id}/destroy`, { token: root })).status).toBe(200);
	expect(await objects.stat(f.id)).toBeNull();
	expect((await fetch(p.url + share.body.data.path)).status).toBe(404);

	// An object no record holds: collected once older than the grace period (0 here), a live file's object stays.
	const live = (await streamedUpload(`${p.url}/special/files/upload`, root, 100)).body.items[0];
	await objects.put("0123456789abcdef0123cccc", Readable.from([Buffer.from("orphan")]), 6);
	const r = (await p.broker.call("special.files.orphans", { graceMs: 0 })) as { removed: number };
	expect(r.removed).toBe(1);
	expect(await objects.stat("0123456789abcdef0123cccc")).toBeNull();
	expect(await objects.stat(live.id)).not.toBeNull();
	const pass = (await p.broker.call("cleaner.run")) as CleanerPass;
	expect(pass.errors).toEqual([]);
});
