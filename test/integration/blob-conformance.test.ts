/**
 * One conformance suite for every blob store (stores/blobs): the local store under a temporary directory, and the S3
 * store against s3rver (an S3-compatible server run in this process on a free port).
 */
import { createHash, randomBytes } from "crypto";
import { Readable } from "stream";
import { readdirSync, rmSync } from "fs";
import path from "path";
import { LocalBlobStore, type BlobStore } from "../../stores/blobs";
import { S3BlobStore } from "../../stores/blobs/s3";
import { tempDir } from "../helpers/platform";
import { startS3, type LocalS3 } from "../helpers/s3";

jest.setTimeout(60_000);

async function text(s: Readable | null): Promise<Buffer> {
	if (!s) throw new Error("no blob");
	const chunks: Buffer[] = [];
	for await (const c of s) chunks.push(c as Buffer);
	return Buffer.concat(chunks);
}

/** `n` bytes produced in 64 KiB chunks, never held whole. */
function generated(n: number, seed = 7): { stream: Readable; sha: string } {
	const h = createHash("sha256");
	let left = n;
	let i = 0;
	const chunkOf = (len: number) => Buffer.alloc(len, (seed + i++) % 251);
	// The hash is computed up front from the same deterministic chunks.
	for (let l = n, j = 0; l > 0; l -= 65536, j++) h.update(Buffer.alloc(Math.min(65536, l), (seed + j) % 251));
	const stream = new Readable({
		read() {
			if (left <= 0) return this.push(null);
			const len = Math.min(65536, left);
			left -= len;
			this.push(chunkOf(len));
		},
	});
	return { stream, sha: h.digest("hex") };
}

const suites: Array<[string, () => Promise<{ store: BlobStore; done: () => Promise<void> }>]> = [
	[
		"local",
		async () => {
			const dir = tempDir("blobs-");
			return { store: new LocalBlobStore(dir), done: async () => rmSync(dir, { recursive: true, force: true }) };
		},
	],
	[
		"s3 (s3rver)",
		async () => {
			const s3: LocalS3 = await startS3();
			const store = new S3BlobStore({ url: s3.url, bucket: s3.bucket, accessKey: s3.accessKey, secretKey: s3.secretKey, region: "us-east-1", prefix: "conf/" });
			return {
				store,
				done: async () => {
					await store.close();
					await s3.stop();
				},
			};
		},
	],
];

describe.each(suites)("blob store: %s", (_name, make) => {
	let store: BlobStore;
	let done: () => Promise<void>;
	beforeAll(async () => {
		({ store, done } = await make());
	});
	afterAll(async () => {
		await done?.();
	});

	test("ping answers true", async () => {
		expect(await store.ping()).toBe(true);
	});

	test("put then get, stat and list; get of a missing key is null", async () => {
		const body = randomBytes(1000);
		await store.put("a1", Readable.from([body]), body.length);
		expect((await text(await store.get("a1"))).equals(body)).toBe(true);
		const st = await store.stat("a1");
		expect(st).toEqual({ key: "a1", size: 1000, modified: expect.any(Number) });
		expect(Math.abs(Date.now() - st!.modified)).toBeLessThan(60_000);
		const keys: string[] = [];
		for await (const b of store.list()) keys.push(b.key);
		expect(keys).toContain("a1");
		expect(await store.get("missing")).toBeNull();
		expect(await store.stat("missing")).toBeNull();
	});

	test("ranges: first bytes, middle, last byte", async () => {
		const body = Buffer.from("0123456789abcdef");
		await store.put("r1", Readable.from([body]), body.length);
		expect((await text(await store.get("r1", { start: 0, end: 3 }))).toString()).toBe("0123");
		expect((await text(await store.get("r1", { start: 5, end: 9 }))).toString()).toBe("56789");
		expect((await text(await store.get("r1", { start: 15, end: 15 }))).toString()).toBe("f");
	});

	test("a put replaces; remove is idempotent and the blob is gone from get, stat and list", async () => {
		await store.put("x1", Readable.from([Buffer.from("old")]), 3);
		await store.put("x1", Readable.from([Buffer.from("newer")]), 5);
		expect((await text(await store.get("x1"))).toString()).toBe("newer");
		await store.remove("x1");
		await store.remove("x1");
		expect(await store.get("x1")).toBeNull();
		expect(await store.stat("x1")).toBeNull();
		for await (const b of store.list()) expect(b.key).not.toBe("x1");
	});

	test("a 6 MiB stream goes in and out intact", async () => {
		const { stream, sha } = generated(6 * 1024 * 1024);
		await store.put("big", stream, 6 * 1024 * 1024);
		const h = createHash("sha256");
		let n = 0;
		for await (const c of (await store.get("big"))!) {
			h.update(c as Buffer);
			n += (c as Buffer).length;
		}
		expect(n).toBe(6 * 1024 * 1024);
		expect(h.digest("hex")).toBe(sha);
	});

	test("a body that fails mid-way leaves no blob under its key", async () => {
		const failing = new Readable({
			read() {
				this.destroy(new Error("client went away"));
			},
		});
		failing.push(Buffer.alloc(1000));
		await expect(store.put("broken", failing, 5000)).rejects.toThrow();
		expect(await store.stat("broken")).toBeNull();
	});

	test("keys that could escape the store are refused", async () => {
		for (const k of ["../x", "a/b", "", ".partial"]) await expect(store.put(k, Readable.from([Buffer.from("x")]), 1)).rejects.toThrow(/invalid blob key/);
	});
});

test("a local store that never stored a blob creates nothing when listed or swept (a node without uploads keeps no files directory)", async () => {
	const parent = tempDir("blobs-none-");
	const store = new LocalBlobStore(path.join(parent, "files"));
	try {
		const listed: string[] = [];
		for await (const b of store.list()) listed.push(b.key);
		expect(listed).toEqual([]);
		expect(await store.sweepPartial(0)).toBe(0);
		expect(readdirSync(parent)).toEqual([]);
		// The first write makes it.
		await store.put("abc", Readable.from([Buffer.from("x")]), 1);
		expect(readdirSync(path.join(parent, "files")).sort()).toEqual([".partial", "abc"]);
	} finally {
		rmSync(parent, { recursive: true, force: true });
	}
});
