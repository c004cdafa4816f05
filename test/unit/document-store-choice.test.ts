/**
 * Issue 22 item 1: which document store a node starts on. PostgreSQL by default; DOCUMENT_STORE chooses; with it
 * unset, a DATA_DIR holding NeDB document files of an earlier version starts on NeDB (and says so, platform.ts).
 * No store is opened here (the choice only), so the file does not run per store.
 */
import { mkdirSync, rmSync, writeFileSync } from "fs";
import path from "path";
import { documentStoreFor, readConfig } from "../../runtime/config";
import { healthBody } from "../../runtime/health";
import { nedbDocumentStores } from "../../runtime/nedb-data";
import { tempDir } from "../helpers/platform";

const saved = { DOCUMENT_STORE: process.env.DOCUMENT_STORE, DATA_DIR: process.env.DATA_DIR };
let dir: string;
const file = (rel: string, content = '{"_id":"x"}\n') => {
	mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
	writeFileSync(path.join(dir, rel), content);
};

beforeEach(() => {
	dir = tempDir("store-choice-");
	delete process.env.DOCUMENT_STORE;
});
afterEach(() => {
	rmSync(dir, { recursive: true, force: true });
	for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k];
	else process.env[k] = v;
});

test("PostgreSQL is the default on a new or empty DATA_DIR, and readConfig chooses by DATA_DIR's files", () => {
	expect(documentStoreFor(dir)).toEqual({ documentStore: "postgres", nedbDataDir: false });
	expect(documentStoreFor(path.join(dir, "not-yet-made"))).toEqual({ documentStore: "postgres", nedbDataDir: false });
	process.env.DATA_DIR = dir;
	expect(readConfig()).toMatchObject({ dataDir: dir, documentStore: "postgres", nedbDataDir: false });
	file("identity/users.db");
	expect(readConfig()).toMatchObject({ dataDir: dir, documentStore: "nedb", nedbDataDir: true });
});

test("a DATA_DIR holding NeDB documents starts on NeDB while DOCUMENT_STORE is unset", () => {
	file("content/notes.db");
	expect(nedbDocumentStores(dir)).toEqual(["content/notes"]);
	expect(documentStoreFor(dir)).toEqual({ documentStore: "nedb", nedbDataDir: true });
	file("_seed.db");
	expect(nedbDocumentStores(dir)).toEqual(["content/notes", "_seed"]);
});

test("what is not NeDB documents does not count: consumer positions, empty files, directories, other .db files", () => {
	file("_stream_offsets.db"); // a test's outbox hold, or positions only
	file("_relay_offsets.db");
	file("identity/users.db", ""); // compacted to nothing
	mkdirSync(path.join(dir, "content", "notes.db"), { recursive: true });
	file("files/ab/cd.db"); // a blob named so
	file("unknown/things.db"); // no collection of the catalog
	file("escape.db"); // a top-level name of no store
	expect(nedbDocumentStores(dir)).toEqual([]);
	expect(documentStoreFor(dir)).toEqual({ documentStore: "postgres", nedbDataDir: false });
});

test("DOCUMENT_STORE decides when set, in any case; anything else refuses to start with the setting's message", () => {
	file("identity/users.db");
	process.env.DOCUMENT_STORE = "postgres";
	expect(documentStoreFor(dir)).toEqual({ documentStore: "postgres", nedbDataDir: false });
	process.env.DOCUMENT_STORE = "NeDB";
	expect(documentStoreFor(dir)).toEqual({ documentStore: "nedb", nedbDataDir: false });
	process.env.DOCUMENT_STORE = "";
	expect(documentStoreFor(dir)).toEqual({ documentStore: "nedb", nedbDataDir: true });
	for (const bad of ["mongo", "pg", "postgres ", "nedb;rm -rf /"]) {
		process.env.DOCUMENT_STORE = bad;
		expect(() => documentStoreFor(dir)).toThrow(`DOCUMENT_STORE must be nedb or postgres, got ${bad}`);
	}
});

test("a health entry carries the kind of what serves it, and only where one is given", () => {
	expect(healthBody({ "document store": true, cache: false }, { "document store": "postgres" })).toEqual({
		status: "error",
		info: { "document store": { status: "up", kind: "postgres" }, cache: { status: "down" } },
	});
	expect(healthBody({ "document store": false }, { "document store": undefined })).toEqual({ status: "error", info: { "document store": { status: "down" } } });
});
