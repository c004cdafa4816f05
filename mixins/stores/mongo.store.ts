/**
 * The production document store: moleculer-db-adapter-mongoose on MONGO_URI, one MongoDB collection per catalog
 * collection, documents keyed by the same 24-hex string ids as the embedded store. Not exercised on machines
 * without MongoDB; the conformance suite runs it whenever MONGO_URI is set.
 */
import MongooseAdapter from "moleculer-db-adapter-mongoose";
import mongoose from "mongoose";
import type { DocumentStore, FindOptions, Filter, StoredDoc } from "./types";
import { renameIdKeys, TENANT_REF, toStoreQuery, updateOf } from "./types";

export class MongoStore implements DocumentStore {
	readonly kind = "mongo" as const;
	private adapter: any;
	private model: mongoose.Model<any>;

	constructor(uri: string, collection: string, private readonly extraIndexes: string[] = []) {
		const schema = new mongoose.Schema({ _id: String }, { strict: false, versionKey: false, collection });
		// `ref` is unique per tenant: the unique index is on the derived `tenant_ref` (see TENANT_REF).
		schema.index({ ref: 1 }, { sparse: true });
		schema.index({ [TENANT_REF]: 1 }, { unique: true, sparse: true });
		for (const f of ["owner", "clients", "deleted_at", ...extraIndexes]) schema.index({ [f]: 1 });
		this.model = mongoose.models[collection] ?? mongoose.model(collection, schema);
		this.adapter = new (MongooseAdapter as any)(uri);
	}

	async connect(): Promise<void> {
		this.adapter.init(null, { schema: { model: this.model, settings: {} }, model: this.model, logger: console });
		await this.adapter.connect();
		await this.model.syncIndexes();
	}

	async disconnect(): Promise<void> {
		await this.adapter.disconnect();
	}

	find(o: FindOptions): Promise<StoredDoc[]> {
		let q = this.model.find(toStoreQuery(o.query), renameIdKeys(o.projection)).lean();
		if (o.sort) q = q.sort(renameIdKeys(o.sort) as Record<string, 1 | -1>);
		if (o.skip) q = q.skip(o.skip);
		if (o.limit) q = q.limit(o.limit);
		return q.exec() as Promise<StoredDoc[]>;
	}

	findOne(q: Filter): Promise<StoredDoc | null> {
		return this.model.findOne(toStoreQuery(q)).lean().exec() as Promise<StoredDoc | null>;
	}

	count(q: Filter): Promise<number> {
		return this.model.countDocuments(toStoreQuery(q)).exec();
	}

	async insert(doc: StoredDoc): Promise<StoredDoc> {
		await this.model.collection.insertOne(doc as any);
		return doc;
	}

	async insertMany(docs: StoredDoc[]): Promise<StoredDoc[]> {
		if (docs.length) await this.model.collection.insertMany(docs as any[]);
		return docs;
	}

	async setMany(ids: string[], set: Record<string, unknown>): Promise<number> {
		const r = await this.model.collection.updateMany({ _id: { $in: ids } } as any, updateOf(set));
		return r.modifiedCount;
	}

	async setOne(id: string, set: Record<string, unknown>): Promise<StoredDoc | null> {
		const r = await this.model.collection.findOneAndUpdate({ _id: id } as any, updateOf(set), { returnDocument: "after" });
		return ((r as any)?.value ?? null) as StoredDoc | null;
	}

	async removeMany(q: Filter): Promise<number> {
		const r = await this.model.collection.deleteMany(toStoreQuery(q) as any);
		return r.deletedCount;
	}

	async updateIf(query: Filter, update: Record<string, unknown>): Promise<StoredDoc | null> {
		const r = await this.model.collection.findOneAndUpdate(toStoreQuery(query) as any, update, { returnDocument: "after" });
		return ((r as any)?.value ?? null) as StoredDoc | null;
	}

	async replaceIf(query: Filter, doc: StoredDoc): Promise<boolean> {
		const { _id, ...rest } = doc;
		const r = await this.model.collection.replaceOne({ ...toStoreQuery(query), _id } as any, rest);
		return r.matchedCount > 0;
	}

	async ping(): Promise<boolean> {
		try {
			await mongoose.connection.db?.admin().ping();
			return mongoose.connection.readyState === 1;
		} catch {
			return false;
		}
	}
}
