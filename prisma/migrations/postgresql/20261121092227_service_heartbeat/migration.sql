-- CreateTable
CREATE TABLE "ServiceHeartbeat" (
    "minute" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "ServiceHeartbeat_pkey" PRIMARY KEY ("minute")
);
