/**
 * The embedded document store: moleculer-db's NeDB adapter, one file per collection under DATA_DIR.
 * NeDB quirks handled here: indexes must be created after load, `{field: null}` does not match a missing field
 * (the engine always stores `deleted_at`), and the append-only file is compacted on load and periodically.
 */
import path from "path";
import DbService from "moleculer-db";
import type { DocumentStore, FindOptions, Filter, StoredDoc } from "./types";
import { renameIdKeys, toStoreQuery } from "./types";
import { ensureDir } from "../../lib/config";
import { badRequest } from "../../lib/errors";

type Datastore = {
	ensureIndex(o: { fieldName: string; unique?: boolean; sparse?: boolean }): Promise<void>;
	find(q: Filter, p?: Record<string, 0 | 1>): { sort(s: object): any; skip(n: number): any; limit(n: number): any; exec(cb: (e: Error | null, d: StoredDoc[]) => void): void };
	findOne(q: Filter): Promise<StoredDoc | null>;
	count(q: Filter): Promise<number>;
	insert<T>(d: T): Promise<T>;
	update(q: Filter, u: object, o: object): Promise<[number, StoredDoc | StoredDoc[]]>;
	remove(q: Filter, o: object): Promise<number>;
	setAutocompactionInterval?(ms: number): void;
	stopAutocompaction?(): void;
	persistence?: { setAutocompactionInterval(ms: number): void; stopAutocompaction(): void };
};

const INDEXES = [
	{ fieldName: "ref", unique: true, sparse: true },
	{ fieldName: "owner" },
	{ fieldName: "clients" },
	{ fieldName: "deleted_at" },
];

/**
 * A validated query can still use a form NeDB does not evaluate (e.g. `$not` under a field, which only MongoDB
 * has): that is the caller's query, so a 400, never a 500.
 */
function queryError(err: unknown): Error {
	const msg = (err as Error)?.message ?? "";
	return /comparison function|logical operator|Unknown|\$/.test(msg) ? badRequest(`query is not supported by the document store: ${msg}`) : (err as Error);
}

export class NedbStore implements DocumentStore {
	readonly kind = "nedb" as const;
	private adapter: { connect(): Promise<void>; disconnect(): Promise<void>; db: Datastore; init(b: unknown, s: unknown): void };

	/** `file` undefined keeps the store in memory (tests). */
	constructor(private readonly file: string | undefined, private readonly extraIndexes: string[] = []) {
		if (file) ensureDir(path.dirname(file));
		this.adapter = new (DbService as any).MemoryAdapter(file ? { filename: file } : {});
	}

	private get db(): Datastore {
		return this.adapter.db;
	}

	async connect(): Promise<void> {
		this.adapter.init(null, null);
		await this.adapter.connect();
		for (const idx of [...INDEXES, ...this.extraIndexes.map((fieldName) => ({ fieldName }))]) await this.db.ensureIndex(idx);
		if (this.file) {
			if (this.db.setAutocompactionInterval) this.db.setAutocompactionInterval(10 * 60 * 1000);
			else this.db.persistence?.setAutocompactionInterval(10 * 60 * 1000);
		}
	}

	async disconnect(): Promise<void> {
		if (this.db?.stopAutocompaction) this.db.stopAutocompaction();
		else this.db?.persistence?.stopAutocompaction();
		await this.adapter.disconnect();
	}

	find(o: FindOptions): Promise<StoredDoc[]> {
		let c = this.db.find(toStoreQuery(o.query), renameIdKeys(o.projection));
		if (o.sort) c = c.sort(renameIdKeys(o.sort)!);
		if (o.skip) c = c.skip(o.skip);
		if (o.limit) c = c.limit(o.limit);
		return new Promise((resolve, reject) => c.exec((err: Error | null, docs: StoredDoc[]) => (err ? reject(queryError(err)) : resolve(docs))));
	}

	findOne(q: Filter): Promise<StoredDoc | null> {
		return this.db.findOne(toStoreQuery(q)).catch((e) => Promise.reject(queryError(e)));
	}

	count(q: Filter): Promise<number> {
		return this.db.count(toStoreQuery(q)).catch((e) => Promise.reject(queryError(e)));
	}

	insert(doc: StoredDoc): Promise<StoredDoc> {
		return this.db.insert(doc);
	}

	insertMany(docs: StoredDoc[]): Promise<StoredDoc[]> {
		return this.db.insert(docs);
	}

	async setMany(ids: string[], set: Record<string, unknown>): Promise<number> {
		const [n] = await this.db.update({ _id: { $in: ids } }, { $set: set }, { multi: true });
		return n;
	}

	async setOne(id: string, set: Record<string, unknown>): Promise<StoredDoc | null> {
		const [n, doc] = await this.db.update({ _id: id }, { $set: set }, { returnUpdatedDocs: true });
		return n ? (doc as StoredDoc) : null;
	}

	removeMany(q: Filter): Promise<number> {
		return this.db.remove(toStoreQuery(q), { multi: true });
	}

	async ping(): Promise<boolean> {
		return !!this.adapter.db;
	}
}
