from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.tasks.exceptions import TaskResultDoesNotExist
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .models import Order
from .tasks import ping, send_receipt


# --8<-- [start:place_order]
@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> HttpResponse:
    item = request.POST.get("item", "")
    quantity = int(request.POST.get("quantity", "1"))
    try:
        with transaction.atomic():
            order = Order.objects.create(item=item, quantity=quantity)
            result = send_receipt.enqueue(order.pk)  # same transaction as the order
            order.receipt_task = result.id
            order.save(update_fields=["receipt_task"])
            if not item:  # anything that fails later in the block undoes both
                raise ValueError("an order needs an item")
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc))
    return JsonResponse({"order": order.pk, "task": result.id}, status=201)
# --8<-- [end:place_order]


# --8<-- [start:order_page]
def order_page(request: HttpRequest, order_id: int) -> HttpResponse:
    order = get_object_or_404(Order, pk=order_id)
    try:
        result = send_receipt.get_result(order.receipt_task)
    except TaskResultDoesNotExist:  # cleaned up by retention, or cancelled
        result = None
    return render(request, "shop/order.html", {"order": order, "result": result})
# --8<-- [end:order_page]


# --8<-- [start:async_view]
@csrf_exempt
async def async_ping(request: HttpRequest) -> HttpResponse:
    result = await ping.aenqueue(request.GET.get("word", "hello"))
    return JsonResponse({"task": result.id}, status=202)
# --8<-- [end:async_view]
