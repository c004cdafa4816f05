/** A gateway's hold on the outbox's pruning (services/api/live-cursor.ts), so that its clients can resume. */
import { createStore, type DocumentStore, type StoreConfig } from "../../stores";

/** How often a gateway renews its hold on the outbox's pruning (the hold counts while renewed: STREAM_POSITION_TTL_MS). */
const HOLD_EVERY_MS = 30_000;

/**
 * Keeps the outbox's pruner from removing what this gateway's clients may resume from (after its restart too): a
 * consumer position at the oldest record of its memory, in the store the pruner reads (the embedded stream's
 * `_stream_offsets`, the relay's `_relay_offsets`). It names a namespace of its own (`<NAMESPACE>.live`), so it
 * counts only while renewed (STREAM_POSITION_TTL_MS): a gateway gone for good holds nothing after that.
 */
export async function holdOutbox(
	cfg: StoreConfig & { namespace?: string; eventStream?: string },
	nodeID: string,
	/** The position the outbox keeps records after (the oldest of the gateway's memory), which the hold may lower. */
	held: { get(): number; set(seq: number): void },
	logger: { warn(...a: unknown[]): void },
): Promise<{ timer: NodeJS.Timeout; close: () => Promise<void> }> {
	const store: DocumentStore = createStore(cfg, cfg.eventStream && cfg.eventStream !== "outbox" ? "_relay_offsets" : "_stream_offsets");
	await store.connect();
	const id = `live-cursors:${nodeID}`;
	// A restarted gateway keeps the hold of its previous run until its memory has turned over once.
	const before = Number((await store.findOne({ id }).catch(() => null))?.seq);
	if (Number.isFinite(before) && before < held.get()) held.set(before);
	const save = async () => {
		const doc = { seq: held.get(), at: Date.now(), ns: `${cfg.namespace ?? ""}.live` };
		if (!(await store.setOne(id, doc))) await store.insert({ id, ...doc });
	};
	await save().catch((err) => logger.warn("live cursors: holding the outbox failed", (err as Error)?.message));
	return { timer: setInterval(() => void save().catch(() => undefined), HOLD_EVERY_MS), close: () => store.disconnect() };
}
