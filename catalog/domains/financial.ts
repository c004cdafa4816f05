import type { DomainDef } from "../types";

export const TRANSACTION_TYPES = ["TRANSFER", "DEPOSIT", "WITHDRAW"] as const;
export const TRANSACTION_STATES = ["PENDING", "VERIFIED", "CANCELLED", "FAILED"] as const;

export const financial: DomainDef = {
	name: "financial",
	restPort: 3060,
	grpcPort: 5060,
	description: "Accounts, wallets, invoices, transactions and currencies",
	collections: [
		{
			name: "accounts",
			description: "Financial accounts",
			fields: { name: { type: "string", required: true, maxLength: 200 }, type: { type: "string", maxLength: 50 }, currency: { type: "string", maxLength: 10 } },
		},
		{
			name: "wallets",
			description: "Wallets (one is created for every new user)",
			fields: {
				user: { type: "string", format: "objectId", relation: "identity/users" },
				currency: { type: "string", maxLength: 10 },
				balance: { type: "integer", readOnly: true, description: "Minor units (cents); set by the platform only, never below zero" },
				/** Balance moves of sagas in flight (`<stage>:<n>`): each is undone at most once. */
				saga_ops: { type: "array", items: "string", internal: true },
			},
		},
		{
			name: "invoices",
			description: "Invoices",
			fields: {
				amount: { type: "integer", required: true, minimum: 0, description: "Minor units (cents)" },
				currency: { type: "string", maxLength: 10 },
				status: { type: "string", enum: ["DRAFT", "ISSUED", "PAID", "CANCELLED"] },
				account: { type: "string", format: "objectId", relation: "financial/accounts" },
				paid_at: { type: "date", readOnly: true },
				transaction: { type: "string", readOnly: true, format: "objectId", relation: "financial/transactions" },
			},
			specials: [
				{
					action: "payment",
					method: "POST",
					path: ":id/payment",
					implemented: true,
					description:
						"Pay the invoice from one of the caller's wallets to the wallet of the invoice's owner (a transaction initiated and verified at once): `status: PAID`, `paid_at`, `transaction`; a paid or cancelled invoice, or one whose `amount` is not the expected one, answers 409; wallets in another currency than the invoice's answer 400",
					body: {
						wallet: { type: "string", required: true, format: "objectId" },
						amount: {
							type: "integer",
							minimum: 1,
							description: "The amount the payer expects to pay (minor units), as it read it: 409 when the invoice says otherwise (the owner changed it since)",
						},
					},
					answer: "data",
					errors: [400, 404, 409],
				},
			],
		},
		{
			name: "transactions",
			description: "Transactions, each linked to a saga",
			fields: {
				amount: { type: "integer", required: true, minimum: 1, description: "Minor units (cents)" },
				currency: { type: "string", maxLength: 10 },
				saga: { type: "string", required: true, format: "objectId", relation: "essential/sagas" },
				wallet: { type: "string", format: "objectId", relation: "financial/wallets" },
				type: { type: "string", enum: TRANSACTION_TYPES },
				payers: { type: "array", items: "object", description: "`[{ wallet, amount }]`" },
				payees: { type: "array", items: "object", description: "`[{ wallet, amount }]`" },
				state: { type: "string", readOnly: true, enum: TRANSACTION_STATES },
				verified_at: { type: "date", readOnly: true },
				canceled_at: { type: "date", readOnly: true },
				failed_at: { type: "date", readOnly: true },
			},
			specials: [
				{
					action: "init",
					method: "POST",
					path: "init",
					implemented: true,
					description: "Start a saga and move the balances as its stages: `state: PENDING` until verify, abort or the saga's expiry (balances restored)",
					body: {
						amount: { type: "integer", required: true, minimum: 1, description: "Minor units (cents)" },
						currency: { type: "string", maxLength: 10 },
						type: {
							type: "string",
							enum: TRANSACTION_TYPES,
							description: "TRANSFER (default), DEPOSIT (payees only) or WITHDRAW (payers only); DEPOSIT and WITHDRAW need a manage grant on financial:wallets",
						},
						payers: { type: "array", items: "object", description: "`[{ wallet, amount }]`, amounts summing to `amount`" },
						payees: { type: "array", items: "object", description: "`[{ wallet, amount }]`, amounts summing to `amount`" },
						ttl: { type: "integer", minimum: 5, description: "Saga lifetime in seconds (default 300)" },
					},
					answer: "data",
					errors: [404, 409],
				},
				{
					action: "verify",
					method: "GET",
					path: ":id/verify",
					implemented: true,
					description: "Commit the transaction's saga: `VERIFIED`, `verified_at`; repeating it answers the same",
					answer: "data",
					errors: [404, 409],
				},
				{
					action: "init",
					method: "GET",
					path: ":id/abort",
					implemented: true,
					description: "Abort the transaction's saga: balances restored, `CANCELLED`, `canceled_at`; repeating it answers the same",
					answer: "data",
					errors: [404, 409],
				},
			],
		},
		{
			name: "currencies",
			description: "Currencies",
			fields: { code: { type: "string", required: true, maxLength: 10 }, name: { type: "string", maxLength: 100 }, symbol: { type: "string", maxLength: 10 } },
		},
	],
};
