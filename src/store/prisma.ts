// The Prisma client types the stores share. Stores are the only code that talks to Prisma; each
// store exports the row types of its own tables.
import type { PrismaClient, Prisma } from '../generated/prisma/sqlite/client';

export type Db = PrismaClient;
export type Tx = Prisma.TransactionClient;
