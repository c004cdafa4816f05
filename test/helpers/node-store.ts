/**
 * What a child node (test/helpers/nodes.ts) keeps in its own DATA_DIR, read from the test's process on the store the
 * node runs: its embedded PostgreSQL (the default; the port from its postmaster.pid, the password from
 * DATA_DIR/postgres.json), or its NeDB files (DOCUMENT_STORE=nedb in the node's environment). A node with
 * DATABASE_URL keeps nothing in DATA_DIR: read its database with bootPlatform's helpers instead.
 */
import { existsSync, readFileSync } from "fs";
import path from "path";
import { createStore, isDuplicateKeyError, type StoreConfig } from "../../mixins/stores";
import { EMBEDDED_PG_SECRET_FILE } from "../../runtime/relational";
import { nedbFileOf } from "../../runtime/nedb-data";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import { storedText } from "./stored";
import type { ChildNode } from "./nodes";

type Node = Pick<ChildNode, "dataDir">;

/** The store a child node started with `env` runs on: DOCUMENT_STORE as the node reads it, else PostgreSQL. */
export function nodeStoreKind(env: Record<string, string | undefined> = {}): "nedb" | "postgres" {
	return (env.DOCUMENT_STORE ?? process.env.DOCUMENT_STORE ?? "postgres").toLowerCase() === "nedb" ? "nedb" : "postgres";
}

const pidFile = (node: Node) => path.join(node.dataDir, "postgres", "postmaster.pid");

/** Whether an embedded PostgreSQL server runs on the node's DATA_DIR now (its postmaster.pid is there while it runs). */
export function embeddedPgRuns(node: Node): boolean {
	return existsSync(pidFile(node));
}

/** The node's store, as a StoreConfig of the test's process (on PostgreSQL: a URL of the node's running server). */
export function nodeStore(node: Node, kind: "nedb" | "postgres" = nodeStoreKind()): StoreConfig {
	if (kind === "nedb") return { dataDir: node.dataDir, documentStore: "nedb" };
	const port = Number(readFileSync(pidFile(node), "utf8").split("\n")[3]);
	const { password } = JSON.parse(readFileSync(path.join(node.dataDir, EMBEDDED_PG_SECRET_FILE), "utf8")) as { password: string };
	return { dataDir: node.dataDir, documentStore: "postgres", databaseUrl: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres` };
}

/** `fn` with the node's store, its outbox connected (on PostgreSQL) for the time of the call. */
async function withStore<T>(node: Node, kind: "nedb" | "postgres" | undefined, fn: (cfg: StoreConfig) => Promise<T>): Promise<T> {
	const cfg = nodeStore(node, kind);
	if (cfg.documentStore === "nedb") return fn(cfg);
	const outbox = sharedOutbox(cfg);
	await outbox.connect();
	try {
		return await fn(cfg);
	} finally {
		await outbox.disconnect();
	}
}

/** One store's stored text on the node (`content/notes`, `_outbox`...), as test/helpers/stored.ts reads a platform's. */
export function nodeStoredText(node: Node, name: string, kind?: "nedb" | "postgres"): Promise<string> {
	return withStore(node, kind, (cfg) => storedText({ cfg, dataDir: node.dataDir }, name));
}

/** Every record of the node's outbox, in seq order (on NeDB its file, read without opening it as a store). */
export function nodeOutboxRecords(node: Node, kind?: "nedb" | "postgres"): Promise<OutboxRecord[]> {
	return withStore(node, kind, async (cfg) => {
		if (cfg.documentStore === "nedb") {
			const byId = new Map<string, OutboxRecord & { _id: string }>();
			const file = nedbFileOf(node.dataDir, "_outbox");
			for (const line of existsSync(file) ? readFileSync(file, "utf8").split("\n") : []) {
				if (!line.trim()) continue;
				const d = JSON.parse(line);
				if (d.$$deleted) byId.delete(d._id);
				else if (d._id && d.event) byId.set(d._id, d);
			}
			return [...byId.values()].sort((a, b) => a.seq - b.seq).map(({ _id, ...r }) => r as OutboxRecord);
		}
		const out: OutboxRecord[] = [];
		for (let after = 0; ; ) {
			const batch = await sharedOutbox(cfg).readFrom(after, 1000);
			out.push(...batch);
			if (batch.length < 1000) return out;
			after = batch[batch.length - 1].seq;
		}
	});
}

/**
 * Keeps every event of the node's outbox from now on: a consumer group that is down, at the start (the outbox keeps
 * an event until every group has passed it). NeDB reads it from DATA_DIR at the start (dataDirHoldingOutbox in
 * test/helpers/platform.ts); on PostgreSQL it is stored once the node's server is up, before the test's writes.
 */
export async function holdNodeOutbox(node: Node, kind: "nedb" | "postgres" = nodeStoreKind()): Promise<void> {
	if (kind === "nedb") {
		if (!existsSync(nedbFileOf(node.dataDir, "_stream_offsets"))) throw new Error("a NeDB node holds its outbox from its start: give it DATA_DIR: dataDirHoldingOutbox()");
		return;
	}
	const offsets = createStore(nodeStore(node, kind), "_stream_offsets");
	await offsets.connect();
	try {
		await offsets.insert({ _id: "test-hold", seq: 0 }).catch((err) => {
			if (!isDuplicateKeyError(err)) throw err;
		});
	} finally {
		await offsets.disconnect();
	}
}
