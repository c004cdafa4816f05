/**
 * financial: the standard collection pattern on every collection of the domain (catalog/domains/financial.ts), and
 * the wallet every new user gets. Wallets come from the durable change stream (consumer group `financial.wallets`,
 * reading identity/users creations) rather than from the fire-and-forget `identity.user.created` event: a wallet is
 * never lost to a crash or a restart, and redelivery is harmless (one wallet per user, see `ensureWallet`).
 */
import type { ServiceSchema } from "moleculer";
import { financial } from "../catalog/domains/financial";
import { collectionMixin, platformContext, platformDoc, type EngineService } from "../engine/collection.mixin";
import { asSchema } from "../lib/service";
import type { OutboxRecord } from "../events/outbox";
import { isDuplicateKeyError, type StoredDoc } from "../stores";
import { configOf } from "../runtime/config";
import { sharedStream, type Consumer } from "../events/stream";
import { invoiceHooks, transactionHooks } from "./financial/transactions";
import { walletHooks, walletIdOf } from "./financial/wallets";

export { walletIdOf };

export const WALLET_GROUP = "financial.wallets";
export const WALLET_CURRENCY = "USD";

/** The financial service's `this` (lib/service.ts). */
type Financial = EngineService & {
	walletConsumer?: Consumer;
	ensureWallet(rec: OutboxRecord): Promise<StoredDoc | null>;
};

const FinancialService: ServiceSchema = asSchema<Financial>({
	name: "financial",
	mixins: [collectionMixin(financial, { transactions: transactionHooks, invoices: invoiceHooks, wallets: walletHooks })],
	methods: {
		/**
		 * The user's wallet, created once: owner = the user, clients = the user document's clients. Found by its id
		 * (`walletIdOf`): a wallet that only names the user in `user` is not the user's and does not stop this one.
		 */
		async ensureWallet(this: Financial, rec: OutboxRecord): Promise<StoredDoc | null> {
			const ev = rec.event;
			if (ev.topic !== "identity.users" || ev.op !== "c" || typeof ev.id !== "string") return null;
			const user = ev.id;
			const store = this.collectionStore("wallets");
			const existing = await store.findOne({ id: walletIdOf(user) });
			if (existing) return existing;
			const clients = [...new Set((rec.clients?.length ? rec.clients : ((ev.after?.clients as string[] | undefined) ?? [])).filter((c) => typeof c === "string" && c))];
			const doc = platformDoc({ user, currency: WALLET_CURRENCY, balance: 0 }, { owner: user, cid: clients[0] ?? user });
			doc.id = walletIdOf(user);
			doc.clients = clients;
			try {
				await store.insert(doc);
			} catch (err) {
				if (isDuplicateKeyError(err)) return store.findOne({ id: walletIdOf(user) });
				throw err;
			}
			// A platform-made write: change event like any other (webhooks, MQTT, stats), with no caller token.
			const ctx = platformContext(this);
			await this.recordChanges(ctx, "wallets", [{ op: "c", before: null, after: doc }]);
			this.logger.debug(`wallet ${doc.id} created for user ${user}`);
			return doc;
		},
	},
	async started(this: Financial) {
		// Runs after the collection mixin's `started` (mixins first): the stores are connected.
		this.walletConsumer = (await sharedStream(configOf(this.broker)).consume(WALLET_GROUP, async (rec) => {
			await this.ensureWallet(rec);
		})) as Consumer;
	},
	async stopped(this: Financial) {
		// Runs before the mixin's `stopped` (reverse order): the consumer ends while the stores are still open.
		await this.walletConsumer?.stop();
		this.walletConsumer = undefined;
	},
});

export default FinancialService;
