/**
 * What a child node (test/helpers/nodes.ts) keeps in its own DATA_DIR, read from the test's process: its embedded
 * PostgreSQL (the port from its postmaster.pid, the password from DATA_DIR/postgres.json). A node with DATABASE_URL
 * keeps nothing in DATA_DIR: read its database with bootPlatform's helpers instead.
 */
import { existsSync, readFileSync } from "fs";
import path from "path";
import { createStore, isDuplicateKeyError, type StoreConfig } from "../../stores";
import { EMBEDDED_PG_SECRET_FILE } from "../../runtime/relational";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import { storedText } from "./stored";
import type { ChildNode } from "./nodes";

type Node = Pick<ChildNode, "dataDir">;

const pidFile = (node: Node) => path.join(node.dataDir, "postgres", "postmaster.pid");

/** Whether an embedded PostgreSQL server runs on the node's DATA_DIR now (its postmaster.pid is there while it runs). */
export function embeddedPgRuns(node: Node): boolean {
	return existsSync(pidFile(node));
}

/** The node's store, as a StoreConfig of the test's process (a URL of the node's running server). */
export function nodeStore(node: Node): StoreConfig {
	const port = Number(readFileSync(pidFile(node), "utf8").split("\n")[3]);
	const { password } = JSON.parse(readFileSync(path.join(node.dataDir, EMBEDDED_PG_SECRET_FILE), "utf8")) as { password: string };
	return { dataDir: node.dataDir, databaseUrl: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres` };
}

/** `fn` with the node's store, its outbox connected for the time of the call. */
async function withStore<T>(node: Node, fn: (cfg: StoreConfig) => Promise<T>): Promise<T> {
	const cfg = nodeStore(node);
	const outbox = sharedOutbox(cfg);
	await outbox.connect();
	try {
		return await fn(cfg);
	} finally {
		await outbox.disconnect();
	}
}

/** One store's stored text on the node (`content/notes`, `_outbox`...), as test/helpers/stored.ts reads a platform's. */
export function nodeStoredText(node: Node, name: string): Promise<string> {
	return withStore(node, (cfg) => storedText({ cfg, dataDir: node.dataDir }, name));
}

/** Every record of the node's outbox, in seq order. */
export function nodeOutboxRecords(node: Node): Promise<OutboxRecord[]> {
	return withStore(node, async (cfg) => {
		const out: OutboxRecord[] = [];
		for (let after = 0; ;) {
			const batch = await sharedOutbox(cfg).readFrom(after, 1000);
			out.push(...batch);
			if (batch.length < 1000) return out;
			after = batch[batch.length - 1].seq;
		}
	});
}

/**
 * Keeps every event of the node's outbox from now on: a consumer group that is down (the outbox keeps an event until
 * every group has passed it), stored once the node's server is up, before the test's writes.
 */
export async function holdNodeOutbox(node: Node): Promise<void> {
	const offsets = createStore(nodeStore(node), "_stream_offsets");
	await offsets.connect();
	try {
		await offsets.insert({ id: "test-hold", seq: 0 }).catch((err) => {
			if (!isDuplicateKeyError(err)) throw err;
		});
	} finally {
		await offsets.disconnect();
	}
}
