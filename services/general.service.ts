/** general: the standard collection pattern on every collection of the domain (catalog/domains/general.ts). */
import type { ServiceSchema } from "moleculer";
import { general } from "../catalog/domains/general";
import { collectionMixin } from "../mixins/collection.mixin";

const GeneralService: ServiceSchema = { name: "general", mixins: [collectionMixin(general)] };

export default GeneralService;
