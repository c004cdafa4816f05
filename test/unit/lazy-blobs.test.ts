/**
 * S3's client library is loaded only by the nodes configured for it (stores/blobs/index.ts): a node on the local blob
 * store never loads it, and one configured for S3 gets it.
 * Each check runs in a fresh process, where the module cache shows what a node's start has loaded.
 */
import { execFileSync } from "child_process";
import path from "path";

const ROOT = path.join(__dirname, "..", "..");

/** Runs `code` in a new Node process (TypeScript through tsx) from the checkout and returns its JSON output. */
function inFreshProcess(code: string): any {
	const out = execFileSync(process.execPath, ["--import", "tsx", "-e", code], { cwd: ROOT, encoding: "utf8", env: { ...process.env, NODE_OPTIONS: "" } });
	return JSON.parse(out.trim().split("\n").pop()!);
}

const LOADED = `const loaded = (m) => Object.keys(require.cache).some((k) => k.includes("/node_modules/" + m + "/"));`;

test("a node on the local blob store does not load the AWS SDK", () => {
	const r = inFreshProcess(`
		${LOADED}
		const { startPlatform } = require("./platform.ts");
		const { createStore } = require("./stores/index.ts");
		const { createBlobStore } = require("./stores/blobs/index.ts");
		const os = require("os");
		const dir = require("fs").mkdtempSync(require("path").join(os.tmpdir(), "lazy-"));
		const store = createStore({ dataDir: dir }, "content/notes");
		const blobs = createBlobStore({ dataDir: dir });
		console.log(JSON.stringify({ startPlatform: typeof startPlatform, store: store.kind, blobs: blobs.constructor.name, s3: loaded("@aws-sdk/client-s3") }));
	`);
	expect(r).toEqual({ startPlatform: "function", store: "postgres", blobs: "LocalBlobStore", s3: false });
});

test("S3 settings load its client and give its store", () => {
	const r = inFreshProcess(`
		${LOADED}
		const { createBlobStore } = require("./stores/blobs/index.ts");
		// It does not connect before use: nothing listens on this port.
		const blobs = createBlobStore({ dataDir: "/nonexistent", s3: { url: "http://127.0.0.1:1", bucket: "b", region: "us-east-1" } });
		console.log(JSON.stringify({ blobs: blobs.constructor.name, s3: loaded("@aws-sdk/client-s3") }));
	`);
	expect(r).toEqual({ blobs: "S3BlobStore", s3: true });
});
