/**
 * MongoDB's and S3's client libraries are loaded only by the nodes configured for them (mixins/stores/index.ts,
 * mixins/blobs/index.ts): a node on the embedded stores never loads them, and one configured for them gets them.
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

test("a node on the embedded stores loads neither mongoose nor the AWS SDK", () => {
	const r = inFreshProcess(`
		${LOADED}
		const { startPlatform } = require("./platform.ts");
		const { createStore } = require("./mixins/stores/index.ts");
		const { createBlobStore } = require("./mixins/blobs/index.ts");
		const os = require("os");
		const dir = require("fs").mkdtempSync(require("path").join(os.tmpdir(), "lazy-"));
		const store = createStore({ dataDir: dir }, "content/notes");
		const blobs = createBlobStore({ dataDir: dir });
		console.log(JSON.stringify({ startPlatform: typeof startPlatform, store: store.kind, blobs: blobs.constructor.name, mongoose: loaded("mongoose"), s3: loaded("@aws-sdk/client-s3") }));
	`);
	expect(r).toEqual({ startPlatform: "function", store: "nedb", blobs: "LocalBlobStore", mongoose: false, s3: false });
});

test("MONGO_URI and S3 settings load their clients and give their stores", () => {
	const r = inFreshProcess(`
		${LOADED}
		const { createStore } = require("./mixins/stores/index.ts");
		const { createBlobStore } = require("./mixins/blobs/index.ts");
		// Neither connects before use: nothing listens on these ports.
		const store = createStore({ dataDir: "/nonexistent", mongoUri: "mongodb://127.0.0.1:1/lazy" }, "content/notes");
		const blobs = createBlobStore({ dataDir: "/nonexistent", s3: { url: "http://127.0.0.1:1", bucket: "b", region: "us-east-1" } });
		console.log(JSON.stringify({ store: store.kind, blobs: blobs.constructor.name, mongoose: loaded("mongoose"), s3: loaded("@aws-sdk/client-s3") }));
	`);
	expect(r).toEqual({ store: "mongo", blobs: "S3BlobStore", mongoose: true, s3: true });
});
