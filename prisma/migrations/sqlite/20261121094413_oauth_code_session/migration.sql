-- AlterTable
ALTER TABLE "OAuthCode" ADD COLUMN "sessionId" TEXT;
