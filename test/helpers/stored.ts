/**
 * What a platform's document store holds, as text: for the tests that check a value is (or is not) stored as written
 * (a hash, never the secret; a file's content, never in a document). Every document of each table, one JSON line
 * each, and the outbox's records.
 */
import { createStore, type StoreConfig } from "../../stores";
import { storeNames } from "../../runtime/store-names";
import { sharedOutbox } from "../../events/outbox";

/** One store's stored text (`special/files`, `_outbox`...): one JSON line per document. */
export async function storedText(p: { cfg: StoreConfig; dataDir: string }, name: string): Promise<string> {
	if (name === "_outbox") return (await sharedOutbox(p.cfg).readFrom(0, 100_000)).map((r) => JSON.stringify(r)).join("\n");
	const s = createStore(p.cfg, name);
	await s.connect();
	try {
		return (await s.find({ query: {} })).map((d) => JSON.stringify(d)).join("\n");
	} finally {
		await s.disconnect();
	}
}

/** Store name → its stored text, for every store that holds something. */
export async function storedTexts(p: { cfg: StoreConfig; dataDir: string }): Promise<Record<string, string>> {
	const out: Record<string, string> = {};
	for (const name of storeNames()) {
		const text = await storedText(p, name);
		if (text) out[name] = text;
	}
	return out;
}
