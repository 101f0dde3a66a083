// The Prisma types the stores share. Stores are the only code that talks to Prisma.
import type { PrismaClient, Prisma } from '../generated/prisma/sqlite/client';

export type Db = PrismaClient;
export type Tx = Prisma.TransactionClient;
export type {
  Account,
  Session,
  ApiToken,
  DeviceKey,
  OAuthCode,
  ExportLink,
  AccountDeletion,
  Event,
  DesktopLink,
  DesktopSession,
} from '../generated/prisma/sqlite/client';
